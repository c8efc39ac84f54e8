"""Channel-blocked convolutions: ``nn.contrib_conv2d_NCHWc`` and
``nn.contrib_depthwise_conv2d_NCHWc`` (TVM's ops, which AlterOpLayout gives x86 convs).

Entry points (TVM's signatures): :func:`contrib_conv2d_nchwc`,
:func:`contrib_depthwise_conv2d_nchwc`. Both are ``OUT_ELEMWISE_FUSABLE`` with
:class:`~kiln.relay.op.op_attrs.Conv2DAttrs`: data in ``NCHW{ic}c``, kernel in
``OIHW{ic}i{oc}o`` (depthwise: ``OIHW1i{oc}o``), output in ``NCHW{oc}c``, so a chain of convs
passes its activations blocked, with no repacking between layers. kiln also accepts NCHW data
(kernel ``OIHW{oc}o`` for the dense conv): a conv whose producer is not blocked reads it as it
is instead of behind a ``layout_transform``; their ``FInferCorrectLayout`` picks that form.

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(1, 2, 8, 8, 8))
>>> w = relay.var("w", shape=(2, 2, 3, 3, 8, 16))
>>> y = relay.nn.contrib_conv2d_nchwc(x, w, padding=1, channels=32, kernel_size=3,
...                                   data_layout="NCHW8c", kernel_layout="OIHW8i16o",
...                                   out_layout="NCHW16c")
>>> y.attrs.out_layout
'NCHW16c'
"""

from __future__ import annotations

import math
import re
from typing import Any

from kiln.relay.op import op_attrs as A
from kiln.relay.op.layout import InferCorrectLayoutOutput, attrs_with
from kiln.relay.op.nn.conv import (
    conv2d_rel,
    conv_infer_correct_layout,
    get_pad_tuple,
    reference_conv2d,
    shape_func_same_batch,
)
from kiln.relay.op.op import (
    OUT_ELEMWISE_FUSABLE,
    call,
    define_op,
    register_compute,
    register_infer_correct_layout,
    register_mac_count,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.rule_util import out_dtype

CONV2D_NCHWC = "nn.contrib_conv2d_NCHWc"
DEPTHWISE_CONV2D_NCHWC = "nn.contrib_depthwise_conv2d_NCHWc"

define_op(CONV2D_NCHWC, conv2d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv2DAttrs,
          "2-D conv on channel-blocked (NCHW{c}) data", 10)
define_op(DEPTHWISE_CONV2D_NCHWC, conv2d_rel, OUT_ELEMWISE_FUSABLE, 2, A.Conv2DAttrs,
          "depthwise 2-D conv on channel-blocked (NCHW{c}) data", 10)


def _attrs(strides, padding, dilation, groups, channels, kernel_size, data_layout,
           kernel_layout, out_layout, out_dtype_):
    def pair(v):
        return tuple(v) if isinstance(v, list | tuple) else (v, v)

    return A.Conv2DAttrs(strides=pair(strides), padding=get_pad_tuple(padding, 2),
                         dilation=pair(dilation), groups=int(groups), channels=channels,
                         kernel_size=None if kernel_size is None else pair(kernel_size),
                         data_layout=data_layout, kernel_layout=kernel_layout,
                         out_layout=out_layout, out_dtype=out_dtype_)


def contrib_conv2d_nchwc(data: Any, kernel: Any, strides: Any = (1, 1), padding: Any = (0, 0),
                         dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
                         kernel_size: Any = None, data_layout: str = "NCHW8c",
                         kernel_layout: str = "OIHW", out_layout: str = "",
                         out_dtype: str = "") -> Any:
    """2-D convolution on channel-blocked data (TVM's ``relay.nn.contrib_conv2d_nchwc``)."""
    return call(CONV2D_NCHWC, [data, kernel], _attrs(
        strides, padding, dilation, groups, channels, kernel_size, data_layout, kernel_layout,
        out_layout, out_dtype))


def contrib_depthwise_conv2d_nchwc(data: Any, kernel: Any, strides: Any = (1, 1),
                                   padding: Any = (0, 0), dilation: Any = (1, 1),
                                   groups: int = 1, channels: int | None = None,
                                   kernel_size: Any = None, data_layout: str = "NCHW8c",
                                   kernel_layout: str = "OIHW", out_layout: str = "",
                                   out_dtype: str = "") -> Any:
    """Depthwise 2-D convolution on channel-blocked data (TVM's
    ``relay.nn.contrib_depthwise_conv2d_nchwc``)."""
    return call(DEPTHWISE_CONV2D_NCHWC, [data, kernel], _attrs(
        strides, padding, dilation, groups, channels, kernel_size, data_layout, kernel_layout,
        out_layout, out_dtype))


# ---- generic compute: through NCHW/OIHW (targets without a blocked kernel) -----------------
@register_compute(CONV2D_NCHWC)
@register_compute(DEPTHWISE_CONV2D_NCHWC)
def compute_conv2d_nchwc(attrs, inputs, out_type):
    """The blocked conv as layout_transform → NCHW/OIHW conv → layout_transform (a correct
    fallback; the x86 strategy has the blocked kernels)."""
    from kiln.topi.nn.conv import conv
    from kiln.topi.transform import layout_transform

    data = layout_transform(inputs[0], attrs.data_layout, "NCHW")
    kernel = layout_transform(inputs[1], attrs.kernel_layout, "OIHW")
    out = conv(data, kernel, list(attrs.strides), list(attrs.padding),
                       list(attrs.dilation), attrs.groups, "NCHW", "OIHW", out_dtype(out_type),
                       name="conv2d")
    return [layout_transform(out, "NCHW", attrs.out_layout or attrs.data_layout)]


for _name in (CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC):
    register_opaque_schedule(_name)
    register_reference(_name, reference_conv2d)
    register_shape_func(_name, False, shape_func_same_batch)


@register_mac_count(CONV2D_NCHWC)
@register_mac_count(DEPTHWISE_CONV2D_NCHWC)
def mac_count_conv2d_nchwc(call_node: Any) -> int:
    """Each output element sums over one filter: the kernel's elements per output channel."""
    kernel = call_node.args[1].checked_type.concrete_shape
    layout = re.findall(r"\d*[A-Za-z]", str(call_node.attrs.kernel_layout))
    out_channels = math.prod(d for d, axis in zip(kernel, layout) if axis[-1] in "Oo")
    return math.prod(call_node.checked_type.concrete_shape) * math.prod(kernel) // out_channels


# ---- layouts: a conv whose producer is not blocked reads NCHW ------------------------------
_BLOCKED_KERNEL = re.compile(r"OIHW(\d+)i(\d+)o")


def conv2d_nchwc_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types):
    """The attrs' layouts, except that NCHW data (a producer AlterOpLayout did not block)
    is read as it is: ``data_layout`` becomes NCHW and the kernel ``OIHW{oc}o`` (depthwise:
    unchanged), saving the transform of the input to ``NCHW{ic}c``."""
    blocked = _BLOCKED_KERNEL.fullmatch(attrs.kernel_layout)
    # an unknown producer layout ("") is NCHW only if the data really has 4 axes: a
    # blocked NCHW{c}c input (e.g. a function parameter) keeps the attrs' layout
    rank = len(getattr(old_in_types[0], "shape", ())) if old_in_types else 0
    if new_in_layouts[0] not in ("", "NCHW") or attrs.data_layout == "NCHW" or \
            blocked is None or rank != 4:
        return conv_infer_correct_layout(attrs, new_in_layouts, old_in_layouts, old_in_types)
    kernel_layout = attrs.kernel_layout if int(blocked.group(1)) == 1 and attrs.groups > 1 \
        else f"OIHW{blocked.group(2)}o"
    new_attrs = attrs_with(attrs, data_layout="NCHW", kernel_layout=kernel_layout,
                           out_layout=attrs.out_layout or attrs.data_layout)
    return InferCorrectLayoutOutput(["NCHW", kernel_layout], [new_attrs.out_layout], new_attrs)


for _name in (CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC):
    register_infer_correct_layout(_name, conv2d_nchwc_infer_correct_layout)


__all__ = ["contrib_conv2d_nchwc", "contrib_depthwise_conv2d_nchwc"]
