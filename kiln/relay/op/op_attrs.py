"""Attribute nodes of the Relay operators (TVM's ``relay.op.op_attrs``).

Entry points: one class per attrs node, e.g. :class:`Conv2DAttrs`, :class:`ReduceAttrs`,
:class:`Resize2DAttrs`; each has TVM's type key (``relay.attrs.Conv2DAttrs``), TVM's field
names in TVM's order, and a keyword constructor with TVM's defaults.

Each class is declared by one :func:`_attrs` line: field names with their defaults. The field
kind for reflection follows the default (``int``, ``float``, ``str``, ``bool``; ``"any"`` for
shapes, tuples and optional values).

Example
-------
>>> from kiln.relay.op.op_attrs import Conv2DAttrs
>>> a = Conv2DAttrs(channels=16, kernel_size=(3, 3))
>>> a.strides, a.data_layout, a["channels"]
((1, 1), 'NCHW', 16)
"""

from __future__ import annotations

from typing import Any

from kiln.ir.attrs import Attrs
from kiln.runtime.container import Array
from kiln.runtime.object import register_object

_KINDS = {bool: bool, int: int, float: float, str: str}


class OpAttrs(Attrs):
    """Base of the typed op attrs: keyword construction over TVM's defaults."""

    _defaults: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self._all_fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        values = {**self._defaults, **kwargs}
        super().__init__(**{name: _freeze(values.get(name)) for name in self._all_fields})

    @classmethod
    def _from_fields(cls, values: dict[str, Any]) -> OpAttrs:
        # load_json hands over lists; freeze them so a round trip is structurally equal
        return super()._from_fields({k: _freeze(v) for k, v in values.items()})


def _freeze(value: Any) -> Any:
    """Lists become tuples (attrs stay immutable); NumPy scalars/arrays become Python values
    so attrs print, compare and serialize the same whatever the frontend passed."""
    if type(value).__module__ == "numpy":
        value = value.tolist()
    if isinstance(value, list | tuple | Array):
        return tuple(_freeze(v) for v in value)
    return value


def declare_attrs(name: str, doc: str, **defaults: Any) -> type:
    """A registered ``relay.attrs.<name>`` class whose fields (and their kinds) are the
    keyword defaults; op families outside this module (QNN) declare theirs with it."""
    fields = {key: _KINDS.get(type(value), "any") for key, value in defaults.items()}
    cls = type(OpAttrs)(name, (OpAttrs,), {
        "_fields": fields, "_defaults": defaults, "__doc__": doc, "__module__": __name__,
    })
    return register_object(f"relay.attrs.{name}")(cls)


_attrs = declare_attrs


# ---- tensor / transform -------------------------------------------------------------------
CastAttrs = _attrs("CastAttrs", "Target dtype of cast.", dtype="")
ExpandDimsAttrs = _attrs("ExpandDimsAttrs", "expand_dims.", axis=0, num_newaxis=1)
DynExpandDimsAttrs = _attrs("DynExpandDimsAttrs", "dyn.expand_dims.", num_newaxis=1)
ConcatenateAttrs = _attrs("ConcatenateAttrs", "concatenate.", axis=0)
TransposeAttrs = _attrs("TransposeAttrs", "transpose; axes None reverses.", axes=None)
ReshapeAttrs = _attrs("ReshapeAttrs", "reshape (0, -1, -2, -3, -4 special values).",
                      newshape=None, allowzero=False)
ReshapeLikeAttrs = _attrs("ReshapeLikeAttrs", "reshape_like.", lhs_begin=0, lhs_end=None,
                          rhs_begin=0, rhs_end=None)
ScatterElementsAttrs = _attrs("ScatterElementsAttrs", "scatter_elements.", axis=0,
                              reduction="update")
ScatterNDAttrs = _attrs("ScatterNDAttrs", "scatter_nd.", mode="update")
GatherAttrs = _attrs("GatherAttrs", "gather.", axis=0)
GatherNDAttrs = _attrs("GatherNDAttrs", "gather_nd.", batch_dims=0, index_rank=None)
TakeAttrs = _attrs("TakeAttrs", "take.", batch_dims=0, axis=None, mode="clip")
InitOpAttrs = _attrs("InitOpAttrs", "full/zeros/ones/broadcast_to.", shape=None, dtype="")
ArangeAttrs = _attrs("ArangeAttrs", "arange.", start=None, stop=None, step=None, dtype="")
StackAttrs = _attrs("StackAttrs", "stack.", axis=0)
RepeatAttrs = _attrs("RepeatAttrs", "repeat.", repeats=1, axis=None)
TileAttrs = _attrs("TileAttrs", "tile.", reps=None)
ReverseAttrs = _attrs("ReverseAttrs", "reverse.", axis=None)
SqueezeAttrs = _attrs("SqueezeAttrs", "squeeze; axis None drops every unit dim.", axis=None)
SplitAttrs = _attrs("SplitAttrs", "split by sections (int) or indices (tuple).",
                    indices_or_sections=None, axis=0)
StridedSliceAttrs = _attrs("StridedSliceAttrs", "strided_slice.", begin=None, end=None,
                           strides=None, slice_mode="end", axes=None)
SliceLikeAttrs = _attrs("SliceLikeAttrs", "slice_like.", axes=None)
ClipAttrs = _attrs("ClipAttrs", "clip.", a_min=0.0, a_max=0.0)
LayoutTransformAttrs = _attrs("LayoutTransformAttrs", "layout_transform.", src_layout="",
                              dst_layout="")
ShapeOfAttrs = _attrs("ShapeOfAttrs", "shape_of.", dtype="int32")
NdarraySizeAttrs = _attrs("NdarraySizeAttrs", "ndarray_size.", dtype="int32")
SequenceMaskAttrs = _attrs("SequenceMaskAttrs", "sequence_mask.", mask_value=0.0, axis=0)
OneHotAttrs = _attrs("OneHotAttrs", "one_hot.", depth=1, axis=-1, dtype="")

# ---- reduce -------------------------------------------------------------------------------
ReduceAttrs = _attrs("ReduceAttrs", "sum/mean/max/min/prod/all/any.", axis=None,
                     keepdims=False, exclude=False)
ArgReduceAttrs = _attrs("ArgReduceAttrs", "argmax/argmin.", axis=None, keepdims=False,
                        select_last_index=False, exclude=False)
VarianceAttrs = _attrs("VarianceAttrs", "variance.", axis=None, keepdims=False,
                       exclude=False, unbiased=False)

# ---- algorithm ----------------------------------------------------------------------------
ArgsortAttrs = _attrs("ArgsortAttrs", "sort/argsort.", axis=-1, is_ascend=True, dtype="int32")
TopKAttrs = _attrs("TopKAttrs", "topk.", k=None, axis=-1, ret_type="both", is_ascend=False,
                   dtype="int32")
ScanopAttrs = _attrs("ScanopAttrs", "cumsum/cumprod.", axis=None, dtype="", exclusive=False)

# ---- nn -----------------------------------------------------------------------------------
_CONV_COMMON = dict(groups=1, channels=None, kernel_size=None)
BiasAddAttrs = _attrs("BiasAddAttrs", "bias_add.", axis=1)
Conv1DAttrs = _attrs("Conv1DAttrs", "conv1d.", strides=(1,), padding=(0, 0), dilation=(1,),
                     **_CONV_COMMON, data_layout="NCW", kernel_layout="OIW", out_layout="",
                     out_dtype="")
Conv2DAttrs = _attrs("Conv2DAttrs", "conv2d.", strides=(1, 1), padding=(0, 0),
                     dilation=(1, 1), **_CONV_COMMON, data_layout="NCHW",
                     kernel_layout="OIHW", out_layout="", out_dtype="")
Conv3DAttrs = _attrs("Conv3DAttrs", "conv3d.", strides=(1, 1, 1), padding=(0, 0, 0),
                     dilation=(1, 1, 1), **_CONV_COMMON, data_layout="NCDHW",
                     kernel_layout="OIDHW", out_layout="", out_dtype="")
Conv1DTransposeAttrs = _attrs("Conv1DTransposeAttrs", "conv1d_transpose.", channels=None,
                              kernel_size=None, strides=(1,), output_padding=(0,),
                              padding=(0,), dilation=(1,), groups=1,
                              data_layout="NCW", kernel_layout="IOW", out_layout="",
                              out_dtype="")
Conv2DTransposeAttrs = _attrs("Conv2DTransposeAttrs", "conv2d_transpose.", channels=None,
                              kernel_size=None, strides=(1, 1), output_padding=(0, 0),
                              padding=(0, 0), dilation=(1, 1), groups=1,
                              data_layout="NCHW", kernel_layout="IOHW", out_layout="",
                              out_dtype="")
ConvWinogradWeightTransformAttrs = _attrs("ConvWinogradWeightTransformAttrs",
                                          "winograd weight transform.", tile_size=4)
ConvGemmWeightTransformAttrs = _attrs("ConvGemmWeightTransformAttrs",
                                      "gemm weight transform.", tile_N=4, tile_K=16)
Conv2DWinogradAttrs = _attrs("Conv2DWinogradAttrs", "winograd conv2d.", tile_size=4,
                             strides=(1, 1), padding=(0, 0), dilation=(1, 1),
                             **_CONV_COMMON, data_layout="NCHW", kernel_layout="OIHW",
                             out_layout="", out_dtype="")
MaxPool1DAttrs = _attrs("MaxPool1DAttrs", "max_pool1d.", pool_size=None, strides=(1,),
                        dilation=(1,), padding=(0,), layout="NCW", out_layout="",
                        ceil_mode=False)
MaxPool2DAttrs = _attrs("MaxPool2DAttrs", "max_pool2d.", pool_size=None, strides=(1, 1),
                        dilation=(1, 1), padding=(0, 0), layout="NCHW", out_layout="",
                        ceil_mode=False)
MaxPool3DAttrs = _attrs("MaxPool3DAttrs", "max_pool3d.", pool_size=None, strides=(1, 1, 1),
                        dilation=(1, 1, 1), padding=(0, 0, 0), layout="NCDHW",
                        out_layout="", ceil_mode=False)
AvgPool1DAttrs = _attrs("AvgPool1DAttrs", "avg_pool1d.", pool_size=None, strides=(1,),
                        dilation=(1,), padding=(0,), layout="NCW", out_layout="",
                        ceil_mode=False, count_include_pad=False)
AvgPool2DAttrs = _attrs("AvgPool2DAttrs", "avg_pool2d.", pool_size=None, strides=(1, 1),
                        dilation=(1, 1), padding=(0, 0), layout="NCHW", out_layout="",
                        ceil_mode=False, count_include_pad=False)
AvgPool3DAttrs = _attrs("AvgPool3DAttrs", "avg_pool3d.", pool_size=None, strides=(1, 1, 1),
                        dilation=(1, 1, 1), padding=(0, 0, 0), layout="NCDHW",
                        out_layout="", ceil_mode=False, count_include_pad=False)
GlobalPool2DAttrs = _attrs("GlobalPool2DAttrs", "global pooling.", layout="NCHW",
                           out_layout="")
AdaptivePool1DAttrs = _attrs("AdaptivePool1DAttrs", "adaptive pool 1d.", output_size=(),
                             layout="NCW", out_layout="")
AdaptivePool2DAttrs = _attrs("AdaptivePool2DAttrs", "adaptive pool 2d.", output_size=(),
                             layout="NCHW", out_layout="")
SoftmaxAttrs = _attrs("SoftmaxAttrs", "softmax/log_softmax.", axis=-1)
PadAttrs = _attrs("PadAttrs", "pad.", pad_width=None, pad_mode="constant")
MirrorPadAttrs = _attrs("MirrorPadAttrs", "mirror_pad.", mode="SYMMETRIC", pad_width=None)
LeakyReluAttrs = _attrs("LeakyReluAttrs", "leaky_relu.", alpha=0.25)
PReluAttrs = _attrs("PReluAttrs", "prelu.", axis=1)
DropoutAttrs = _attrs("DropoutAttrs", "dropout.", rate=0.5)
BatchNormAttrs = _attrs("BatchNormAttrs", "batch_norm.", axis=1, epsilon=1e-5, center=True,
                        scale=True)
InstanceNormAttrs = _attrs("InstanceNormAttrs", "instance_norm.", axis=1, epsilon=1e-5,
                           center=True, scale=True)
LayerNormAttrs = _attrs("LayerNormAttrs", "layer_norm.", axis=-1, epsilon=1e-5, center=True,
                        scale=True)
GroupNormAttrs = _attrs("GroupNormAttrs", "group_norm.", num_groups=0, axis=1, epsilon=1e-5,
                        center=True, scale=True)
LRNAttrs = _attrs("LRNAttrs", "lrn.", size=5, axis=1, bias=2.0, alpha=1e-4, beta=0.75)
L2NormalizeAttrs = _attrs("L2NormalizeAttrs", "l2_normalize.", eps=0.0, axis=None)
DenseAttrs = _attrs("DenseAttrs", "dense.", units=None, out_dtype="")
MatmulAttrs = _attrs("MatmulAttrs", "matmul.", units=None, out_dtype="", transpose_a=False,
                     transpose_b=False)
DensePackAttrs = _attrs("DensePackAttrs", "contrib_dense_pack.", units=None, out_dtype="",
                        weight_layout="NC")
BatchMatmulAttrs = _attrs("BatchMatmulAttrs", "batch_matmul.", out_dtype="",
                          transpose_a=False, transpose_b=False)
UpSamplingAttrs = _attrs("UpSamplingAttrs", "upsampling.", scale_h=1.0, scale_w=1.0,
                         layout="NCHW", method="nearest_neighbor", align_corners=False)
SubPixelAttrs = _attrs("SubPixelAttrs", "depth_to_space/space_to_depth.", block_size=1,
                       layout="NCHW", mode="DCR")

# ---- image --------------------------------------------------------------------------------
_RESIZE_COMMON = dict(method="linear", coordinate_transformation_mode="half_pixel",
                      rounding_method="", cubic_alpha=-0.5, cubic_exclude=0,
                      extrapolation_value=0.0, out_dtype="")
Resize1DAttrs = _attrs("Resize1DAttrs", "image.resize1d.", size=None, roi=None, layout="NCW",
                       **_RESIZE_COMMON)
Resize2DAttrs = _attrs("Resize2DAttrs", "image.resize2d.", size=None, roi=None,
                       layout="NCHW", **_RESIZE_COMMON)

# ---- internal (annotation, memory, vm) -----------------------------------------------------
OnDeviceAttrs = _attrs("OnDeviceAttrs", "on_device.", virtual_device=None,
                       constrain_result=False, constrain_body=True)
DeviceCopyAttrs = _attrs("DeviceCopyAttrs", "device_copy.", src_virtual_device=None,
                         dst_virtual_device=None)
AllocStorageAttrs = _attrs("AllocStorageAttrs", "memory.alloc_storage.", dtype="float32",
                           virtual_device=None)
AllocTensorAttrs = _attrs("AllocTensorAttrs", "memory.alloc_tensor.", dtype="float32",
                          const_shape=None, assert_shape=None)
ReshapeTensorAttrs = _attrs("ReshapeTensorAttrs", "vm.reshape_tensor.", newshape=None)
DebugAttrs = _attrs("DebugAttrs", "debug.", debug_func=None)
CompilerAttrs = _attrs("CompilerAttrs", "annotation.compiler_begin/end.", compiler="")
CastHintAttrs = _attrs("CastHintAttrs", "annotation.cast_hint.", dtype="")
CallLoweredAttrs = _attrs("CallLoweredAttrs", "call_lowered.", metadata=None)

__all__ = ["OpAttrs"] + [name for name, value in list(globals().items())
                         if isinstance(value, type) and name.endswith("Attrs")
                         and value is not OpAttrs]
