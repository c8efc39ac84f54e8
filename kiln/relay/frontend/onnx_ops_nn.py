"""ONNX converters: convolution, pooling, normalization, resizing and pixel shuffles.

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import
(``Conv``, ``ConvTranspose``, ``MaxPool``, ``AveragePool``, ``BatchNormalization``,
``LayerNormalization``, ``GroupNormalization``, ``Resize`` …).

ONNX lists pads as ``(begin_1, …, begin_n, end_1, …, end_n)``, the order kiln's conv and pool
ops take; ``auto_pad`` is resolved here from the static input shape.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_nn
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "ConvTranspose" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import (
    OnnxOpConverter,
    register,
    register_function,
    unsupported,
)
from kiln.relay.frontend.onnx_resize import SCALE_MAPPED, resize_through_scale

__all__: list[str] = []


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


def _auto_pads(auto_pad: str, in_dims, kernel, strides, dilations, op_name: str) -> list[int]:
    """Explicit pads for SAME_UPPER / SAME_LOWER / VALID from static spatial dims."""
    if auto_pad == "VALID":
        return [0] * (2 * len(kernel))
    if not is_static(in_dims):
        raise unsupported(op_name, f"auto_pad={auto_pad} with unknown spatial dimensions")
    begins, ends = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def _window_params(x, attrs, kernel, ctx, op_name):
    n = len(kernel)
    strides = list(attrs.get("strides", [1] * n))
    dilations = list(attrs.get("dilations", [1] * n))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("", "NOTSET"):
        pads = list(attrs.get("pads", [0] * (2 * n)))
    else:
        pads = _auto_pads(auto_pad, ctx.shape(x)[2:], kernel, strides, dilations, op_name)
    return strides, dilations, pads


# ---- convolution --------------------------------------------------------------------------
CONV = {1: (relay.nn.conv1d, "NCW", "OIW"), 2: (relay.nn.conv2d, "NCHW", "OIHW"),
        3: (relay.nn.conv3d, "NCDHW", "OIDHW")}
CONV_TRANSPOSE = {1: (relay.nn.conv1d_transpose, "NCW", "IOW"),
                  2: (relay.nn.conv2d_transpose, "NCHW", "IOHW")}


def convert_conv(inputs, attrs, ctx):
    """ONNX Conv (1-3 spatial dims, groups, auto_pad); the integer convolutions reuse it."""
    x, weight = inputs[0], inputs[1]
    w_shape = ctx.shape(weight)
    kernel = list(attrs.get("kernel_shape", w_shape[2:]))
    n = len(kernel)
    if n not in CONV:
        raise unsupported("Conv", f"{n}-D convolution")
    strides, dilations, pads = _window_params(x, attrs, kernel, ctx, "Conv")
    fn, data_layout, kernel_layout = CONV[n]
    # float16 accumulates in float32 and rounds once, as the matmuls do (onnx_ops_math.matmul)
    dtype = ctx.dtype(x)
    wide = "float32" if dtype == "float16" else ""
    out = fn(x, weight, strides=strides, padding=pads, dilation=dilations,
             groups=attrs.get("group", 1), channels=w_shape[0], kernel_size=kernel,
             data_layout=data_layout, kernel_layout=kernel_layout, out_dtype=wide)
    if wide:
        out = relay.cast(out, dtype)
    if len(inputs) > 2 and inputs[2] is not None:
        out = relay.nn.bias_add(out, inputs[2], axis=1)
    return out


register_function("Conv", convert_conv)


def _conv_transpose(inputs, attrs, ctx):
    x, weight = inputs[0], inputs[1]
    w_shape = ctx.shape(weight)
    kernel = list(attrs.get("kernel_shape", w_shape[2:]))
    n = len(kernel)
    if n not in CONV_TRANSPOSE:
        raise unsupported("ConvTranspose", f"{n}-D transposed convolution")
    group = attrs.get("group", 1)
    strides = list(attrs.get("strides", [1] * n))
    dilations = list(attrs.get("dilations", [1] * n))
    output_padding = list(attrs.get("output_padding", [0] * n))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    pads = list(attrs.get("pads", [0] * (2 * n)))
    if "output_shape" in attrs or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        in_dims = ctx.shape(x)[2:]
        if not is_static(in_dims):
            raise unsupported("ConvTranspose", "output_shape with unknown input dimensions")
        if "output_shape" in attrs:
            target = list(attrs["output_shape"])[-n:]
        else:
            target = [d * s for d, s in zip(in_dims, strides)]
        begins, ends = [], []
        for i in range(n):
            total = (strides[i] * (in_dims[i] - 1) + output_padding[i]
                     + (kernel[i] - 1) * dilations[i] + 1 - target[i])
            if total < 0:  # the requested output is larger: the excess goes to the end
                output_padding[i] -= total
                total = 0
            if auto_pad == "SAME_UPPER" or (auto_pad in ("", "NOTSET") and
                                            "output_shape" in attrs):
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * n)
    fn, data_layout, kernel_layout = CONV_TRANSPOSE[n]
    out = fn(x, weight, strides=strides, padding=pads, dilation=dilations, groups=group,
             channels=w_shape[1] * group, kernel_size=kernel, data_layout=data_layout,
             kernel_layout=kernel_layout, output_padding=output_padding)
    if len(inputs) > 2 and inputs[2] is not None:
        out = relay.nn.bias_add(out, inputs[2], axis=1)
    return out


register_function("ConvTranspose", _conv_transpose)


# ---- pooling ------------------------------------------------------------------------------
MAX_POOL = {1: relay.nn.max_pool1d, 2: relay.nn.max_pool2d, 3: relay.nn.max_pool3d}
AVG_POOL = {1: relay.nn.avg_pool1d, 2: relay.nn.avg_pool2d, 3: relay.nn.avg_pool3d}
LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def _pool(table, op_name, **extra):
    def convert(inputs, attrs, ctx):
        x = inputs[0]
        if ctx.num_outputs > 1:
            raise unsupported(op_name, "the Indices output")
        kernel = list(attrs["kernel_shape"])
        n = len(kernel)
        strides, dilations, pads = _window_params(x, attrs, kernel, ctx, op_name)
        options = {key: bool(attrs.get(key, 0)) for key in extra}
        return table[n](x, pool_size=kernel, strides=strides, dilation=dilations,
                        padding=pads, layout=LAYOUTS[n],
                        ceil_mode=bool(attrs.get("ceil_mode", 0)), **options)

    return convert


register_function("MaxPool", _pool(MAX_POOL, "MaxPool"))
register_function("AveragePool", _pool(AVG_POOL, "AveragePool", count_include_pad=True))


def _lp_pool(inputs, attrs, ctx):
    """LpPool: (sum over the window of |x|^p)^(1/p), as an average pool counting pads."""
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides, dilations, pads = _window_params(x, attrs, kernel, ctx, "LpPool")
    dtype = ctx.dtype(x)
    p = attrs.get("p", 2)
    powered = relay.power(relay.abs(x), _const(p, dtype))
    mean = AVG_POOL[n](powered, pool_size=kernel, strides=strides, dilation=dilations,
                       padding=pads, layout=LAYOUTS[n], ceil_mode=bool(attrs.get("ceil_mode", 0)),
                       count_include_pad=True)
    total = relay.multiply(mean, _const(int(np.prod(kernel)), dtype))
    return relay.power(total, _const(1.0 / p, dtype))


register_function("LpPool", _lp_pool)


def _global_pool(reduce_fn):
    def convert(inputs, attrs, ctx):
        x = inputs[0]
        return reduce_fn(x, list(range(2, ctx.rank(x))), True)

    return convert


register_function("GlobalAveragePool", _global_pool(relay.mean))
register_function("GlobalMaxPool", _global_pool(relay.max))


def _global_lp_pool(inputs, attrs, ctx):
    x = inputs[0]
    p = attrs.get("p", 2)
    axes = list(range(2, ctx.rank(x)))
    dtype = ctx.dtype(x)
    total = relay.sum(relay.power(relay.abs(x), _const(p, dtype)), axes, True)
    return relay.power(total, _const(1.0 / p, dtype))


register_function("GlobalLpPool", _global_lp_pool)


# ---- normalization ------------------------------------------------------------------------
def _batch_norm(inputs, attrs, ctx):
    x, scale, bias, mean, var = inputs[:5]
    if attrs.get("training_mode", 0):
        return _batch_norm_training(x, scale, bias, mean, var, attrs, ctx)
    out = relay.nn.batch_norm(x, scale, bias, mean, var, axis=1,
                              epsilon=attrs.get("epsilon", 1e-5))
    return out[0]


register_function("BatchNormalization", _batch_norm)


def _batch_norm_training(x, scale, bias, mean, var, attrs, ctx):
    """Training mode: normalize with the batch statistics and update the running ones."""
    rank = ctx.rank(x)
    axes = [0, *range(2, rank)]
    channel_shape = [-1] + [1] * (rank - 2)
    dtype = ctx.dtype(x)
    batch_mean = relay.mean(x, axes)
    batch_var = relay.variance(x, axes)
    inv_std = relay.rsqrt(relay.add(batch_var, _const(attrs.get("epsilon", 1e-5), dtype)))
    normed = relay.multiply(relay.subtract(x, relay.reshape(batch_mean, channel_shape)),
                            relay.reshape(inv_std, channel_shape))
    out = relay.add(relay.multiply(normed, relay.reshape(scale, channel_shape)),
                    relay.reshape(bias, channel_shape))
    momentum = attrs.get("momentum", 0.9)
    keep, take = _const(momentum, dtype), _const(1 - momentum, dtype)
    running_mean = relay.add(relay.multiply(mean, keep), relay.multiply(batch_mean, take))
    running_var = relay.add(relay.multiply(var, keep), relay.multiply(batch_var, take))
    return [out, running_mean, running_var]


def _instance_norm(inputs, attrs, ctx):
    x, scale, bias = inputs
    return relay.nn.instance_norm(x, scale, bias, axis=1, epsilon=attrs.get("epsilon", 1e-5))


register_function("InstanceNormalization", _instance_norm)


def _normalize(x, axes, epsilon, ctx):
    """(x - mean) / sqrt(var + eps) over ``axes``, with the mean and 1/std kept."""
    mean = relay.mean(x, axes, True)
    centered = relay.subtract(x, mean)
    var = relay.mean(relay.multiply(centered, centered), axes, True)
    inv_std = relay.rsqrt(relay.add(var, _const(epsilon, ctx.dtype(x))))
    return relay.multiply(centered, inv_std), mean, inv_std


def _layer_norm(inputs, attrs, ctx):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = ctx.rank(x)
    axis = attrs.get("axis", -1)
    axis = axis + rank if axis < 0 else axis
    epsilon = attrs.get("epsilon", 1e-5)
    if ctx.num_outputs == 1 and axis == rank - 1 and bias is not None and \
            ctx.rank(scale) == 1 and ctx.rank(bias) == 1:
        return relay.nn.layer_norm(x, scale, bias, axis=-1, epsilon=epsilon)
    normed, mean, inv_std = _normalize(x, list(range(axis, rank)), epsilon, ctx)
    out = relay.multiply(normed, scale)
    if bias is not None:
        out = relay.add(out, bias)
    return [out, mean, inv_std]


register_function("LayerNormalization", _layer_norm, since=17)


@register("GroupNormalization")
class GroupNormalization(OnnxOpConverter):
    """GroupNormalization: scale/bias per group at opset 18, per channel from 21."""

    @classmethod
    def _impl_v18(cls, inputs, attrs, ctx):
        x, scale, bias = inputs
        groups = attrs["num_groups"]
        channels = ctx.shape(x)[1]
        repeat = channels // groups
        return cls._group_norm(x, relay.repeat(scale, repeat, 0), relay.repeat(bias, repeat, 0),
                               groups, attrs)

    @classmethod
    def _impl_v21(cls, inputs, attrs, ctx):
        x, scale, bias = inputs
        return cls._group_norm(x, scale, bias, attrs["num_groups"], attrs)

    @staticmethod
    def _group_norm(x, scale, bias, groups, attrs):
        return relay.nn.group_norm(x, scale, bias, num_groups=groups, axis=1,
                                   epsilon=attrs.get("epsilon", 1e-5))


def _mean_variance_norm(inputs, attrs, ctx):
    x = inputs[0]
    normed, _, _ = _normalize(x, list(attrs.get("axes", [0, 2, 3])), 1e-9, ctx)
    return normed


register_function("MeanVarianceNormalization", _mean_variance_norm)


def _lp_norm(inputs, attrs, ctx):
    x = inputs[0]
    axis, p = attrs.get("axis", -1), attrs.get("p", 2)
    if p == 1:
        norm = relay.sum(relay.abs(x), [axis], True)
    else:
        norm = relay.sqrt(relay.sum(relay.multiply(x, x), [axis], True))
    # an all-zero slice stays zero (ONNX defines 0 / 0 as 0 here)
    zero = _const(0, ctx.dtype(x))
    is_zero = relay.equal(norm, zero)
    return relay.where(is_zero, relay.zeros_like(x),
                       relay.divide(x, relay.where(is_zero, relay.ones_like(norm), norm)))


register_function("LpNormalization", _lp_norm)


def _lrn(inputs, attrs, ctx):
    return relay.nn.lrn(inputs[0], size=attrs["size"], axis=1, bias=attrs.get("bias", 1.0),
                        alpha=attrs.get("alpha", 1e-4), beta=attrs.get("beta", 0.75))


register_function("LRN", _lrn)


# ---- pixel shuffles -----------------------------------------------------------------------
register_function("DepthToSpace", lambda inputs, attrs, ctx: relay.nn.depth_to_space(
    inputs[0], attrs["blocksize"], "NCHW", attrs.get("mode", "DCR")))
def _space_to_depth(inputs, attrs, ctx):
    x, block = inputs[0], attrs["blocksize"]
    if attrs.get("mode", "DCR") == "DCR":
        return relay.nn.space_to_depth(x, block, "NCHW")
    if attrs["mode"] != "CRD":
        raise unsupported("SpaceToDepth", f"mode {attrs['mode']!r}")
    # CRD (opset 25): output channel c * block**2 + (row offset * block + column offset)
    n, c, h, w = ctx.shape(x)
    blocks = relay.reshape(x, [n, c, h // block, block, w // block, block])
    moved = relay.transpose(blocks, [0, 1, 3, 5, 2, 4])
    return relay.reshape(moved, [n, c * block * block, h // block, w // block])


register_function("SpaceToDepth", _space_to_depth)


# ---- resizing -----------------------------------------------------------------------------
RESIZE_METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}
RESIZE = {3: (relay.image.resize1d, "NCW"), 4: (relay.image.resize2d, "NCHW")}


def _resize(x, sizes, scales, roi, attrs, ctx, default_coordinates="half_pixel"):
    shape = ctx.shape(x)
    rank = len(shape)
    if rank not in RESIZE:
        raise unsupported("Resize", f"a rank-{rank} input (kiln resizes 1-D and 2-D images)")
    mode = attrs.get("mode", "nearest")
    if mode not in RESIZE_METHODS:
        raise unsupported("Resize", f"mode {mode!r}")
    if attrs.get("antialias", 0):
        raise unsupported("Resize", "antialias=1")
    axes = list(attrs.get("axes", range(rank)))
    axes = [a + rank if a < 0 else a for a in axes]
    if sizes is not None:
        full = list(shape)
        for axis, size in zip(axes, sizes):
            full[axis] = int(size)
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            ratios = [full[a] / shape[a] for a in axes]
            ratio = min(ratios) if policy == "not_larger" else max(ratios)
            for axis in axes:
                full[axis] = int(np.floor(shape[axis] * ratio + 0.5))
    else:
        factors = [1.0] * rank
        for axis, scale in zip(axes, scales):
            factors[axis] = float(scale)
        full = [int(np.floor(d * f)) for d, f in zip(shape, factors)]
        inexact = [f for d, f in zip(shape, factors) if d * f != np.floor(d * f)]
        coordinates = attrs.get("coordinate_transformation_mode", default_coordinates)
        if inexact and coordinates in SCALE_MAPPED:
            if rank != 4 or attrs.get("exclude_outside", 0) and max(factors) > 1:
                raise unsupported("Resize", f"scales {inexact} whose output size is not an "
                                  "exact multiple of the input, on a non-4-D input or "
                                  "upscaling with exclude_outside=1")
            rounding = attrs.get("nearest_mode", "round_prefer_floor") \
                if mode == "nearest" else ""
            return resize_through_scale(
                x, relay.const(np.array(factors, "float32")),
                relay.const(np.array(full, "float32")), coordinates, RESIZE_METHODS[mode],
                rounding, attrs, ctx)
        if coordinates == "half_pixel_symmetric":  # an exact size: the same as half_pixel
            attrs = {**attrs, "coordinate_transformation_mode": "half_pixel"}
    if full[:2] != list(shape[:2]):
        raise unsupported("Resize", "resizing the batch or channel axis")
    coordinates = attrs.get("coordinate_transformation_mode", default_coordinates)
    roi_spatial = None
    if roi is not None and coordinates == "tf_crop_and_resize":
        roi = [float(r) for r in roi]
        roi_spatial = roi[2:rank] + roi[rank + 2:]
    fn, layout = RESIZE[rank]
    rounding = attrs.get("nearest_mode", "round_prefer_floor") if mode == "nearest" else ""
    return fn(x, full[2:], roi_spatial, layout, RESIZE_METHODS[mode], coordinates, rounding,
              attrs.get("cubic_coeff_a", -0.75), attrs.get("exclude_outside", 0),
              attrs.get("extrapolation_value", 0.0))


def _known(ctx, expr):
    if expr is None:
        return None
    value = ctx.value(expr)
    if value is None:
        return expr
    value = value.reshape(-1)
    return value if value.size else None


def _dynamic_resize(x, sizes, scales, attrs, ctx, roi=None):
    """Resize with sizes/scales known only at run time: ``dyn.image.resize2d``; ``axes`` and
    ``keep_aspect_ratio_policy`` are applied to the run-time values."""
    rank = ctx.rank(x)
    if rank != 4:
        raise unsupported("Resize", "run-time scales or sizes on a non-4-D input")
    if attrs.get("antialias", 0):
        raise unsupported("Resize", "antialias=1 with run-time scales or sizes")
    axes = [a + rank if a < 0 else a for a in attrs.get("axes", range(rank))]
    shape = relay.cast(relay.shape_of(x, "int64"), "float32")

    def full(values, default):
        """A (rank,) vector: ``values`` at the listed axes, ``default`` elsewhere."""
        values = relay.cast(values, "float32")
        return relay.concatenate([
            relay.take(values, _const([axes.index(i)], "int64")) if i in axes else
            relay.strided_slice(default, [i], [i + 1]) for i in range(rank)], 0)

    coordinates = attrs.get("coordinate_transformation_mode", "half_pixel")
    if sizes is None:
        scale = full(scales, _const([1.0] * rank, "float32"))
        exact = relay.multiply(shape, scale)
        target = relay.floor(exact)
        if coordinates in SCALE_MAPPED and attrs.get("exclude_outside", 0):
            # the unpadded crop (onnx_resize) is exact for downscales only: an inexact size
            # becomes -1, which the VM's shape check refuses at run time rather than
            # resizing with the wrong coordinates
            target = relay.where(relay.equal(target, exact), target,
                                 _const([-1.0] * rank, "float32"))
        elif coordinates in SCALE_MAPPED:
            # Relay's resize maps through the size ratio, ONNX's scale only when the output
            # size is exact: otherwise map through the scale (onnx_resize)
            normal = _dynamic_resize(x, relay.strided_slice(target, [2], [4]), None,
                                     {**attrs, "axes": [2, 3], "coordinate_transformation_mode":
                                      "half_pixel" if coordinates == "half_pixel_symmetric"
                                      else coordinates}, ctx)
            mode = attrs.get("mode", "nearest")
            rounding = attrs.get("nearest_mode", "round_prefer_floor") \
                if mode == "nearest" else ""
            through = resize_through_scale(x, scale, target, coordinates,
                                           RESIZE_METHODS[mode], rounding, attrs, ctx)
            return relay.If(relay.all(relay.equal(target, exact)), normal, through)
    else:
        target = full(sizes, shape)
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            listed = _const(axes, "int64")
            ratios = relay.take(relay.divide(target, shape), listed)
            ratio = relay.min(ratios) if policy == "not_larger" else relay.max(ratios)
            scaled = relay.floor(relay.add(relay.multiply(shape, ratio),
                                           _const(0.5, "float32")))
            mask = relay.const(np.isin(np.arange(rank), axes))
            target = relay.where(mask, scaled, shape)
    sizes = relay.cast(target, "int64")
    size = relay.strided_slice(relay.cast(sizes, "int64"), [2], [4])
    mode = attrs.get("mode", "nearest")
    rounding = attrs.get("nearest_mode", "round_prefer_floor") if mode == "nearest" else ""
    coordinates = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coordinates == "tf_crop_and_resize" and roi is not None:
        # ONNX lists (starts, ends) over the listed axes; Relay wants (h0, w0, h1, w1)
        count = len(axes)
        order = [axes.index(2), axes.index(3), axes.index(2) + count, axes.index(3) + count]
        roi = relay.take(relay.cast(roi, "float32"), _const(order, "int64"))
    else:
        roi = None
    return relay.image.resize2d(
        x, size, roi, "NCHW", RESIZE_METHODS[mode],
        attrs.get("coordinate_transformation_mode", "half_pixel"), rounding,
        attrs.get("cubic_coeff_a", -0.75), attrs.get("exclude_outside", 0),
        attrs.get("extrapolation_value", 0.0))


@register("Resize")
class Resize(OnnxOpConverter):
    """Resize: (X, scales) at opset 10, (X, roi, scales, sizes) from 11."""

    @classmethod
    def _impl_v10(cls, inputs, attrs, ctx):
        scales = _known(ctx, inputs[1])
        if isinstance(scales, relay.Expr):
            attrs = {"coordinate_transformation_mode": "asymmetric", **attrs}
            return _dynamic_resize(inputs[0], None, scales, attrs, ctx)
        return _resize(inputs[0], None, scales, None, attrs, ctx, "asymmetric")

    @classmethod
    def _impl_v11(cls, inputs, attrs, ctx):
        get = [inputs[i] if len(inputs) > i else None for i in range(4)]
        roi, scales, sizes = (_known(ctx, e) for e in get[1:])
        if any(isinstance(v, relay.Expr) for v in (scales, sizes)):
            return _dynamic_resize(inputs[0], sizes, scales, attrs, ctx, get[1])
        return _resize(inputs[0], sizes, scales, roi, attrs, ctx)


@register("Upsample")
class Upsample(OnnxOpConverter):
    """Upsample (deprecated Resize): scales as an attribute at 7, an input from 9."""

    @classmethod
    def _impl_v7(cls, inputs, attrs, ctx):
        attrs = {"nearest_mode": "floor", **attrs}
        return _resize(inputs[0], None, attrs["scales"], None, attrs, ctx, "asymmetric")

    @classmethod
    def _impl_v9(cls, inputs, attrs, ctx):
        scales = _known(ctx, inputs[1])
        attrs = {"nearest_mode": "floor", **attrs}
        if isinstance(scales, relay.Expr):
            attrs = {"coordinate_transformation_mode": "asymmetric", **attrs}
            return _dynamic_resize(inputs[0], None, scales, attrs, ctx)
        return _resize(inputs[0], None, scales, None, attrs, ctx, "asymmetric")


def _rms_norm(inputs, attrs, ctx):
    x, scale = inputs[0], inputs[1]
    rank = ctx.rank(x)
    axis = attrs.get("axis", -1)
    axes = list(range(axis + rank if axis < 0 else axis, rank))
    mean_square = relay.mean(relay.multiply(x, x), axes, True)
    inv_rms = relay.rsqrt(relay.add(mean_square, _const(attrs.get("epsilon", 1e-5),
                                                        ctx.dtype(x))))
    return relay.multiply(relay.multiply(x, inv_rms), scale)


register_function("RMSNormalization", _rms_norm, since=23)


# ---- losses -------------------------------------------------------------------------------
def _nll(log_prob, target, weight, attrs, ctx):
    """Negative log-likelihood of ``target`` classes (axis 1 of ``log_prob``), ONNX style:
    per-class weights, an ignored class, and none/sum/mean reduction."""
    dtype = ctx.dtype(log_prob)
    target = relay.cast(target, "int64")
    ignore = attrs.get("ignore_index")
    keep = None
    if ignore is not None:
        keep = relay.not_equal(target, _const(ignore, "int64"))
        target = relay.where(keep, target, relay.zeros_like(target))
    picked = relay.squeeze(relay.gather(log_prob, 1, relay.expand_dims(target, 1)), [1])
    weights = relay.take(weight, target, axis=0) if weight is not None else \
        relay.ones_like(picked)
    if keep is not None:
        weights = relay.where(keep, weights, relay.zeros_like(weights))
    loss = relay.negative(relay.multiply(picked, weights))
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return relay.sum(loss)
    if weight is None and keep is None:
        return relay.mean(loss)
    return relay.divide(relay.sum(loss), relay.cast(relay.sum(weights), dtype))


def _nll_loss(inputs, attrs, ctx):
    weight = inputs[2] if len(inputs) > 2 else None
    return _nll(inputs[0], inputs[1], weight, attrs, ctx)


def _softmax_cross_entropy(inputs, attrs, ctx):
    log_prob = relay.nn.log_softmax(inputs[0], axis=1)
    weight = inputs[2] if len(inputs) > 2 else None
    loss = _nll(log_prob, inputs[1], weight, attrs, ctx)
    return [loss, log_prob] if ctx.num_outputs > 1 else loss


register_function("NegativeLogLikelihoodLoss", _nll_loss, since=12)
register_function("SoftmaxCrossEntropyLoss", _softmax_cross_entropy, since=12)


# ---- signal windows -----------------------------------------------------------------------
# Cosine-sum windows: w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size-1.
WINDOWS = {"HannWindow": (0.5, 0.5), "HammingWindow": (25 / 46, 21 / 46),
           "BlackmanWindow": (0.42, 0.5, 0.08)}


def _window(coefficients):
    def convert(inputs, attrs, ctx):
        from kiln.relay.frontend.onnx import onnx_dtype

        size = relay.cast(relay.reshape(inputs[0], []), "float32")
        n = relay.arange(_const(0, "float32"), size, _const(1, "float32"), dtype="float32")
        period = size if attrs.get("periodic", 1) else relay.subtract(size, _const(1, "float32"))
        phase = relay.divide(relay.multiply(_const(2 * np.pi, "float32"), n), period)
        total = None
        for k, a in enumerate(coefficients):
            term = relay.multiply(_const((-1) ** k * a, "float32"),
                                  relay.cos(relay.multiply(_const(k, "float32"), phase)))
            total = term if total is None else relay.add(total, term)
        return relay.cast(total, onnx_dtype(attrs.get("output_datatype", 1)))

    return convert


for _name, _coefficients in WINDOWS.items():
    register_function(_name, _window(_coefficients), since=17)
