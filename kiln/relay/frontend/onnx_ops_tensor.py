"""ONNX converters: shapes, layout and indexing (Reshape, Slice, Gather, Pad, Cast, Expand …).

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

Shape-like inputs (Reshape's shape, Slice's starts, Pad's pads …) are read as constants when
the graph converter knows their value (constants fold as the graph is converted); an input
computed at run time gives the ``dyn.*`` form of the op where Relay has one.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_tensor
>>> from kiln.relay.frontend.onnx_registry import get_converter
>>> get_converter("Squeeze", 11) is not get_converter("Squeeze", 13)
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
    required,
    unsupported,
)
from kiln.runtime.dtype import DataType

__all__ = ["split_dynamic"]


def _const(value, dtype: str):
    return relay.const(np.asarray(value, dtype=dtype), dtype)


def _ints(ctx, expr, op_name: str, what: str) -> list[int] | None:
    """The value of a 1-D integer input as a list, None when the input is omitted."""
    if expr is None:
        return None
    value = ctx.value(expr)
    if value is None:
        raise unsupported(op_name, f"{what} computed at run time")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _static_shape(ctx, x, op_name: str) -> tuple[int, ...]:
    shape = ctx.shape(x)
    if not is_static(shape):
        raise unsupported(op_name, "an input with unknown dimensions")
    return shape


def _onnx_dtype(elem_type: int) -> str:
    from kiln.relay.frontend.onnx import onnx_dtype

    return onnx_dtype(elem_type)


# ---- constants ----------------------------------------------------------------------------
def _constant(inputs, attrs, ctx):
    if "value" in attrs:
        value = np.asarray(attrs["value"])
        return relay.const(value, value.dtype.name)
    table = {"value_float": "float32", "value_floats": "float32", "value_int": "int64",
             "value_ints": "int64"}
    for key, dtype in table.items():
        if key in attrs:
            return _const(attrs[key], dtype)
    raise unsupported("Constant", f"the attribute(s) {sorted(attrs)}")


register_function("Constant", _constant)


def _constant_of_shape(inputs, attrs, ctx):
    value = np.asarray(attrs.get("value", np.zeros(1, "float32"))).reshape(-1)
    dtype = value.dtype.name
    shape = ctx.value(inputs[0])
    fill = _const(value[0], dtype)
    if shape is None:
        return relay.full(fill, relay.cast(inputs[0], "int64"), dtype)
    return relay.full(fill, [int(d) for d in shape.reshape(-1)], dtype)


register_function("ConstantOfShape", _constant_of_shape)


def _eye_like(inputs, attrs, ctx):
    x = inputs[0]
    rows, cols = _static_shape(ctx, x, "EyeLike")
    dtype = _onnx_dtype(attrs["dtype"]) if "dtype" in attrs else ctx.dtype(x)
    return _const(np.eye(rows, cols, k=attrs.get("k", 0)), dtype)


register_function("EyeLike", _eye_like)


def _range(inputs, attrs, ctx):
    start, limit, delta = inputs
    dtype = ctx.dtype(start)
    return relay.arange(start, limit, delta, dtype=dtype)


register_function("Range", _range)


# ---- shape queries ------------------------------------------------------------------------
@register("Shape")
class Shape(OnnxOpConverter):
    """Shape: a constant for static inputs, ``shape_of`` otherwise; start/end from 15."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        x = inputs[0]
        shape = ctx.shape(x)
        rank = len(shape)
        start, end = attrs.get("start", 0), attrs.get("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        if is_static(shape[start:end]):
            return _const(list(shape[start:max(start, end)]), "int64")
        return relay.strided_slice(relay.shape_of(x, "int64"), [start], [end])

    _impl_v15 = _impl_v1


def _size(inputs, attrs, ctx):
    shape = ctx.shape(inputs[0])
    if is_static(shape):
        return _const(int(np.prod(shape)), "int64")
    return relay.ndarray_size(inputs[0], "int64")


register_function("Size", _size)


# ---- reshaping ----------------------------------------------------------------------------
@register("Reshape")
class Reshape(OnnxOpConverter):
    """Reshape: the target shape is an attribute before opset 5, an input from 5."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        return relay.reshape(inputs[0], list(required(attrs, "shape", "Reshape")))

    @classmethod
    def _impl_v5(cls, inputs, attrs, ctx):
        x, shape = inputs
        value = ctx.value(shape)
        allowzero = bool(attrs.get("allowzero", 0))
        if value is None:
            return relay.reshape(x, shape)
        newshape = [int(v) for v in value.reshape(-1)]
        in_shape = ctx.shape(x)
        if allowzero or not is_static(in_shape):
            return relay.reshape(x, newshape, allowzero=allowzero)
        # resolve ONNX's 0 (copy) and -1 (infer) here so the Relay shape is explicit
        resolved = [in_shape[i] if d == 0 else d for i, d in enumerate(newshape)]
        if -1 in resolved:
            known = int(np.prod([d for d in resolved if d != -1]))
            resolved[resolved.index(-1)] = int(np.prod(in_shape)) // known if known else 0
        return relay.reshape(x, resolved)


def _flatten(inputs, attrs, ctx):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = attrs.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if is_static(shape):
        return relay.reshape(x, [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))])
    if axis == 1:
        return relay.reshape(x, [0, -1])
    if axis == 0:
        return relay.reshape(x, [1, -1])
    raise unsupported("Flatten", f"axis {axis} with unknown input dimensions")


register_function("Flatten", _flatten)


def _transpose(inputs, attrs, ctx):
    perm = attrs.get("perm")
    return relay.transpose(inputs[0], list(perm) if perm is not None else None)


register_function("Transpose", _transpose)


@register("Squeeze")
class Squeeze(OnnxOpConverter):
    """Squeeze: axes as an attribute before opset 13, an optional input from 13."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        axes = attrs.get("axes")
        return relay.squeeze(inputs[0], list(axes) if axes is not None else None)

    @classmethod
    def _impl_v13(cls, inputs, attrs, ctx):
        if len(inputs) > 1 and inputs[1] is not None and ctx.value(inputs[1]) is None:
            return _runtime_squeeze(inputs[0], inputs[1], ctx)
        axes = _ints(ctx, inputs[1] if len(inputs) > 1 else None, "Squeeze", "axes")
        if axes is None:
            shape = ctx.shape(inputs[0])
            axes = [i for i, d in enumerate(shape) if d == 1]
        return relay.squeeze(inputs[0], axes)


def _unsqueeze(x, axes, ctx):
    rank = ctx.rank(x) + len(axes)
    for axis in sorted(a + rank if a < 0 else a for a in axes):
        x = relay.expand_dims(x, axis)
    return x


@register("Unsqueeze")
class Unsqueeze(OnnxOpConverter):
    """Unsqueeze: axes (positions in the output) as an attribute before 13, an input from 13."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        return _unsqueeze(inputs[0], list(required(attrs, "axes", "Unsqueeze")), ctx)

    @classmethod
    def _impl_v13(cls, inputs, attrs, ctx):
        if ctx.value(inputs[1]) is None:
            return _runtime_unsqueeze(inputs[0], inputs[1], ctx)
        return _unsqueeze(inputs[0], _ints(ctx, inputs[1], "Unsqueeze", "axes"), ctx)


def _wrap_axes(axes, rank):
    axes = relay.cast(axes, "int64")
    return relay.where(relay.less(axes, _const(0, "int64")),
                       relay.add(axes, _const(rank, "int64")), axes)


def _listed_axes(axes, rank):
    """(rank,) bool: which of ``rank`` axes the run-time ``axes`` list names."""
    axes = _wrap_axes(axes, rank)
    hits = relay.equal(relay.reshape(axes, [-1, 1]), _const(np.arange(rank)[None, :], "int64"))
    return relay.greater(relay.max(relay.cast(hits, "int32"), [0]), _const(0, "int32"))


def _runtime_squeeze(x, axes, ctx):
    """Squeeze axes known at run time: reshape to the dims of the axes not listed."""
    rank, count = ctx.rank(x), ctx.shape(axes)[0]
    listed = _listed_axes(axes, rank)
    key = relay.add(relay.multiply(relay.cast(listed, "int64"), _const(rank, "int64")),
                    _const(np.arange(rank), "int64"))
    kept = relay.strided_slice(relay.argsort(key, dtype="int64"), [0], [rank - count])
    return relay.reshape(x, relay.take(relay.shape_of(x, "int64"), kept))


def _runtime_unsqueeze(x, axes, ctx):
    """Unsqueeze axes known at run time: output dim j is 1 where listed, else the next input
    dim (input index j - number of listed positions before j)."""
    out_rank = ctx.rank(x) + ctx.shape(axes)[0]
    listed = _listed_axes(axes, out_rank)
    listed_count = relay.cumsum(relay.cast(listed, "int64"), axis=0)
    source = relay.subtract(_const(np.arange(out_rank), "int64"), listed_count)
    source = relay.maximum(source, _const(0, "int64"))
    in_shape = relay.concatenate([relay.shape_of(x, "int64"), _const([1], "int64")], 0)
    dims = relay.where(listed, _const(1, "int64"), relay.take(in_shape, source, mode="clip"))
    return relay.reshape(x, dims)


def _expand(inputs, attrs, ctx):
    x, shape = inputs
    value = ctx.value(shape)
    in_shape = ctx.shape(x)
    if value is None or not is_static(in_shape):
        # bidirectional broadcast against a ones tensor of the requested shape
        if value is not None:
            shape = [int(v) for v in value.reshape(-1)]
        return relay.where(relay.ones(shape, "bool"), x, x)
    target = np.broadcast_shapes(tuple(in_shape), tuple(int(v) for v in value.reshape(-1)))
    return relay.broadcast_to(x, list(target))


register_function("Expand", _expand)


def _tile(inputs, attrs, ctx):
    x, repeats = inputs
    value = ctx.value(repeats)
    return relay.tile(x, [int(v) for v in value] if value is not None else repeats)


register_function("Tile", _tile)


# ---- joining and splitting ----------------------------------------------------------------
def _concat(inputs, attrs, ctx):
    return relay.concatenate([i for i in inputs if i is not None],
                             axis=required(attrs, "axis", "Concat"))


register_function("Concat", _concat)


def _split_indices(sizes):
    return list(np.cumsum(sizes)[:-1].astype(int))


def _split(x, axis, sizes, ctx):
    if 0 in sizes:  # relay.split has no empty parts: slice each one
        starts = [0, *np.cumsum(sizes)[:-1].astype(int)]
        return [relay.strided_slice(x, [int(b)], [int(b) + n], axes=[axis])
                for b, n in zip(starts, sizes)]
    outputs = relay.split(x, _split_indices(sizes), axis) if len(sizes) > 1 else [x]
    return [outputs[i] for i in range(len(sizes))]


def _equal_sizes(ctx, x, axis, parts, op_name):
    dim = _static_shape(ctx, x, op_name)[axis]
    chunk = -(-dim // parts)
    return [min(chunk, dim - i * chunk) for i in range(parts)]


@register("Split")
class Split(OnnxOpConverter):
    """Split: sizes as an attribute before 13, an input from 13; num_outputs from 18."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        axis = attrs.get("axis", 0)
        sizes = attrs.get("split")
        if sizes is None and len(inputs) > 1 and inputs[1] is not None:
            sizes = _ints(ctx, inputs[1], "Split", "split")
        if not sizes:
            sizes = _equal_sizes(ctx, inputs[0], axis, ctx.num_outputs, "Split")
        return _split(inputs[0], axis, list(sizes), ctx)

    @classmethod
    def _impl_v13(cls, inputs, attrs, ctx):
        axis = attrs.get("axis", 0)
        if len(inputs) > 1 and inputs[1] is not None and ctx.value(inputs[1]) is None:
            return split_dynamic(inputs[0], inputs[1], axis, ctx)
        sizes = _ints(ctx, inputs[1] if len(inputs) > 1 else None, "Split", "split")
        if sizes is None:
            parts = attrs.get("num_outputs", ctx.num_outputs)
            sizes = _equal_sizes(ctx, inputs[0], axis, parts, "Split")
        return _split(inputs[0], axis, sizes, ctx)


def split_dynamic(x, sizes, axis, ctx):
    """Split at sizes known only at run time: one ``dyn.strided_slice`` per part."""
    sizes = relay.cast(sizes, "int64")
    ends = relay.cumsum(sizes, axis=0, dtype="int64")
    starts = relay.subtract(ends, sizes)
    axes = _const([axis], "int64")
    return [Slice._dynamic(x, relay.take(starts, _const([i], "int64")),
                           relay.take(ends, _const([i], "int64")), axes, None, ctx)
            for i in range(ctx.shape(sizes)[0])]


def _slice(x, starts, ends, axes, steps, ctx):
    """ONNX slicing with clamped bounds; negative steps gather the selected indices."""
    shape = ctx.shape(x)
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [a + rank if a < 0 else a
                                                           for a in axes]
    steps = steps or [1] * len(starts)
    if not all(isinstance(shape[a], int) for a in axes):
        return relay.strided_slice(x, starts, ends, steps, axes=axes)
    # full-rank bounds: untouched axes keep their whole extent
    begin = [0] * rank
    end = [d if isinstance(d, int) else 2**31 - 1 for d in shape]
    stride = [1] * rank
    gathers = []
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        picked = range(shape[axis])[slice(start, stop, step)]
        if step > 0:
            begin[axis] = picked.start if len(picked) else 0
            end[axis] = picked.stop if len(picked) else 0
            stride[axis] = step
        else:
            gathers.append((axis, list(picked)))
    out = relay.strided_slice(x, begin, end, stride)
    for axis, indices in gathers:
        out = relay.take(out, _const(indices, "int64"), axis=axis, mode="fast")
    return out


@register("Slice")
class Slice(OnnxOpConverter):
    """Slice: starts/ends/axes as attributes before 10, inputs (with steps) from 10."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        axes = attrs.get("axes")
        return _slice(inputs[0], list(attrs["starts"]), list(attrs["ends"]),
                      list(axes) if axes is not None else None, None, ctx)

    @classmethod
    def _impl_v10(cls, inputs, attrs, ctx):
        x = inputs[0]
        args = [inputs[i] if len(inputs) > i else None for i in range(1, 5)]
        if any(a is not None and ctx.value(a) is None for a in args):
            return cls._dynamic(x, *args, ctx=ctx)
        starts, ends, axes, steps = (_ints(ctx, a, "Slice", "bounds") for a in args)
        return _slice(x, starts, ends, axes, steps, ctx)

    @staticmethod
    def _dynamic(x, starts, ends, axes, steps, ctx):
        """Bounds known only at run time: ``dyn.strided_slice`` on full-rank bound vectors."""
        rank = ctx.rank(x)
        if axes is not None and ctx.value(axes) is None:
            return _slice_runtime_axes(x, starts, ends, axes, steps, ctx)
        if axes is None:
            axes_list = list(range(ctx.shape(starts)[0]))
        else:
            axes_list = _ints(ctx, axes, "Slice", "axes")
        axes_list = [a + rank if a < 0 else a for a in axes_list]

        def full(values, default):
            if values is None:
                values = _const([default] * len(axes_list), "int64")
            values = relay.cast(values, "int64")
            pieces = [relay.take(values, _const([axes_list.index(axis)], "int64"))
                      if axis in axes_list else _const([default], "int64")
                      for axis in range(rank)]
            return relay.concatenate(pieces, 0)

        return relay.strided_slice(x, full(starts, 0), full(ends, 2**62), full(steps, 1))


def _slice_runtime_axes(x, starts, ends, axes, steps, ctx):
    """Slice whose axes are known only at run time: each axis takes its bound from the
    position that names it, or the whole extent when none does."""
    rank = ctx.rank(x)
    axes = relay.cast(axes, "int64")
    axes = relay.where(relay.less(axes, _const(0, "int64")),
                       relay.add(axes, _const(rank, "int64")), axes)
    hits = relay.cast(relay.equal(relay.reshape(axes, [-1, 1]),
                                  _const(np.arange(rank)[None, :], "int64")), "int32")
    listed = relay.greater(relay.max(hits, [0]), _const(0, "int32"))
    position = relay.argmax(hits, axis=[0])

    def full(values, default):
        if values is None:
            return _const([default] * rank, "int64")
        picked = relay.take(relay.cast(values, "int64"), position)
        return relay.where(listed, picked, _const([default] * rank, "int64"))

    return relay.strided_slice(x, full(starts, 0), full(ends, 2**62), full(steps, 1))


# ---- gather and scatter -------------------------------------------------------------------
def _wrap_indices(indices, dim, ctx):
    """Negative indices count from the end: add ``dim`` to them."""
    value = ctx.value(indices)
    dtype = ctx.dtype(indices)
    if value is not None:
        return _const(np.where(value < 0, value + dim, value), dtype)
    return relay.where(relay.less(indices, _const(0, dtype)),
                       relay.add(indices, _const(dim, dtype)), indices)


def _gather(inputs, attrs, ctx):
    x, indices = inputs
    axis = attrs.get("axis", 0)
    dim = _static_shape(ctx, x, "Gather")[axis]
    return relay.take(x, _wrap_indices(indices, dim, ctx), axis=axis, mode="fast")


def _gather_elements(inputs, attrs, ctx):
    x, indices = inputs
    axis = attrs.get("axis", 0)
    dim = _static_shape(ctx, x, "GatherElements")[axis]
    return relay.gather(x, axis, _wrap_indices(indices, dim, ctx))


def _last_axis_first(indices, ctx):
    rank = ctx.rank(indices)
    return relay.transpose(indices, [rank - 1, *range(rank - 1)])


def _gather_nd(inputs, attrs, ctx):
    x, indices = inputs
    return relay.gather_nd(x, _last_axis_first(indices, ctx), attrs.get("batch_dims", 0))


for _name, _fn in {"Gather": _gather, "GatherElements": _gather_elements,
                   "GatherND": _gather_nd}.items():
    register_function(_name, _fn)

SCATTER_REDUCTIONS = {"none": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}


def _scatter_elements(inputs, attrs, ctx):
    x, indices, updates = inputs
    axis = attrs.get("axis", 0)
    dim = _static_shape(ctx, x, "ScatterElements")[axis]
    return relay.scatter_elements(x, _wrap_indices(indices, dim, ctx), updates, axis,
                                  SCATTER_REDUCTIONS[attrs.get("reduction", "none")])


def _scatter_nd(inputs, attrs, ctx):
    x, indices, updates = inputs
    return relay.scatter_nd(x, _last_axis_first(indices, ctx), updates,
                            SCATTER_REDUCTIONS[attrs.get("reduction", "none")])


register_function("Scatter", _scatter_elements)
register_function("ScatterElements", _scatter_elements)
register_function("ScatterND", _scatter_nd)


# ---- padding ------------------------------------------------------------------------------
PAD_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect"}


def _pad(x, pads, value, mode, ctx, axes=None):
    rank = ctx.rank(x)
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    count = len(axes)
    before, after = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        before[axis], after[axis] = pads[i], pads[i + count]
    if mode not in PAD_MODES:
        raise unsupported("Pad", f"mode {mode!r}")
    width = [(max(b, 0), max(a, 0)) for b, a in zip(before, after)]
    out = x
    if any(b or a for b, a in width):
        out = relay.nn.pad(x, width, value, PAD_MODES[mode])
    if any(b < 0 or a < 0 for b, a in zip(before, after)):
        shape = ctx.shape(out)
        begin = [-min(b, 0) for b in before]
        end = [shape[i] + min(a, 0) for i, a in enumerate(after)]
        out = relay.strided_slice(out, begin, end)
    return out


@register("Pad")
class Pad(OnnxOpConverter):
    """Pad: pads/value as attributes before 11, inputs from 11, an axes input from 18."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        pads = attrs.get("pads", attrs.get("paddings"))
        return _pad(inputs[0], list(pads), float(attrs.get("value", 0.0)),
                    attrs.get("mode", "constant"), ctx)

    @classmethod
    def _impl_v11(cls, inputs, attrs, ctx):
        x = inputs[0]
        axes = inputs[3] if len(inputs) > 3 else None
        if ctx.value(inputs[1]) is None or (axes is not None and ctx.value(axes) is None):
            return cls._dynamic(x, inputs[1], inputs[2] if len(inputs) > 2 else None,
                                attrs.get("mode", "constant"), ctx, axes)
        pads = _ints(ctx, inputs[1], "Pad", "pads")
        # constant_value may be a one-element 1-D tensor (ONNX's own function bodies do that)
        value = relay.reshape(inputs[2], []) if len(inputs) > 2 and inputs[2] is not None \
            else _const(0, ctx.dtype(x))
        axes = _ints(ctx, inputs[3] if len(inputs) > 3 else None, "Pad", "axes")
        return _pad(x, pads, value, attrs.get("mode", "constant"), ctx, axes)


    @staticmethod
    def _dynamic(x, pads, value, mode, ctx, axes=None):
        """Pads known only at run time: ``dyn.nn.pad`` with a (rank, 2) pad-width tensor."""
        if mode not in PAD_MODES:
            raise unsupported("Pad", f"mode {mode!r}")
        rank = ctx.rank(x)
        pads = relay.cast(pads, "int64")
        if axes is not None:
            count = ctx.shape(axes)[0]
            listed = _listed_axes(axes, rank)
            hits = relay.cast(relay.equal(
                relay.reshape(_wrap_axes(axes, rank), [-1, 1]),
                _const(np.arange(rank)[None, :], "int64")), "int32")
            position = relay.cast(relay.argmax(hits, axis=[0]), "int64")
            zeros = _const([0] * rank, "int64")
            before = relay.where(listed, relay.take(pads, position), zeros)
            after = relay.where(listed, relay.take(pads, relay.add(
                position, _const(count, "int64"))), zeros)
            pads = relay.concatenate([before, after], 0)
        width = relay.transpose(relay.reshape(pads, [2, rank]), (1, 0))
        if value is None:
            value = _const(0, ctx.dtype(x))
        return relay.nn.pad(x, width, relay.reshape(value, []), PAD_MODES[mode])


# ---- casting and selection ----------------------------------------------------------------
# Where rounding to nearest even leaves an 8-bit float's range (|x| from here on overflows;
# the largest finite value's mantissa is even for e4m3fn only, so the midpoint rounds down):
# beyond it ONNX Cast with saturate=0 gives NaN (or ±inf for e5m2, the one with infinities).
_FLOAT8_OVERFLOW = {"float8_e4m3fn": (464.0, False), "float8_e4m3fnuz": (248.0, True),
                    "float8_e5m2": (61440.0, True), "float8_e5m2fnuz": (61440.0, True)}


def onnx_cast(x, dtype: str, saturate: bool, ctx):
    """ONNX Cast of ``x`` to ``dtype``: Relay's cast (which saturates the 8-bit floats), and
    for ``saturate=0`` from a float, NaN / ±inf where the value overflows the 8-bit float."""
    source = ctx.dtype(x)
    if saturate or dtype not in _FLOAT8_OVERFLOW or not source.startswith(("float", "bfloat")):
        return relay.cast(x, dtype)
    limit, inclusive = _FLOAT8_OVERFLOW[dtype]
    wide = "float64" if source == "float64" else "float32"
    magnitude = relay.abs(relay.cast(x, wide))
    over = (relay.greater_equal if inclusive else relay.greater)(magnitude, _const(limit, wide))
    over = relay.logical_or(over, relay.isinf(magnitude))
    storage = DataType(dtype).numpy_dtype  # constants of the type itself: a cast saturates

    def special_const(value):
        return relay.const(np.asarray(value, dtype=np.float32).astype(storage), dtype)

    if dtype == "float8_e5m2":
        special = relay.where(relay.less(relay.cast(x, wide), _const(0, wide)),
                              special_const(-np.inf), special_const(np.inf))
    else:
        special = special_const(np.nan)
    return relay.where(over, special, relay.cast(x, dtype))


def _cast(inputs, attrs, ctx):
    return onnx_cast(inputs[0], _onnx_dtype(required(attrs, "to", "Cast")),
                     bool(attrs.get("saturate", 1)), ctx)


register_function("Cast", _cast)
register_function("BitCast", lambda inputs, attrs, ctx: relay.reinterpret(
    inputs[0], _onnx_dtype(required(attrs, "to", "BitCast"))), since=26)
register_function("CastLike", lambda inputs, attrs, ctx: onnx_cast(
    inputs[0], ctx.dtype(inputs[1]), bool(attrs.get("saturate", 1)), ctx))
register_function("Where", lambda inputs, attrs, ctx: relay.where(*inputs))


@register("TopK")
class TopK(OnnxOpConverter):
    """TopK: k as an attribute before 10, an input from 10; largest/sorted from 11."""

    @classmethod
    def _impl_v1(cls, inputs, attrs, ctx):
        return cls._topk(inputs[0], int(required(attrs, "k", "TopK")), attrs, ctx)

    @classmethod
    def _impl_v10(cls, inputs, attrs, ctx):
        k = ctx.value(inputs[1])
        return cls._topk(inputs[0], int(k.reshape(-1)[0]) if k is not None else inputs[1],
                         attrs, ctx)

    @staticmethod
    def _topk(x, k, attrs, ctx):
        axis = attrs.get("axis", -1)
        out = relay.topk(x, k, axis=axis, ret_type="both",
                         is_ascend=not attrs.get("largest", 1), dtype="int64")
        return [out[0], out[1]]


def _non_zero(inputs, attrs, ctx):
    value = ctx.value(inputs[0])
    if value is not None:
        return _const(np.array(np.nonzero(value)), "int64")
    return relay.transpose(relay.cast(relay.argwhere(inputs[0]), "int64"), (1, 0))


register_function("NonZero", _non_zero)


def _one_hot(inputs, attrs, ctx):
    indices, depth, values = inputs
    depth_value = ctx.value(depth)
    if depth_value is None:
        depth = relay.cast(relay.reshape(depth, []), "int64")
        depth_expr = depth
    else:
        depth = int(np.asarray(depth_value).reshape(-1)[0])
        depth_expr = _const(depth, "int64")
    dtype = ctx.dtype(values)
    off, on = relay.take(values, _const(0, "int32")), relay.take(values, _const(1, "int32"))
    indices = relay.cast(indices, "int64")
    indices = relay.where(relay.less(indices, _const(0, "int64")),
                          relay.add(indices, depth_expr), indices)
    return relay.one_hot(indices, on, off, depth, attrs.get("axis", -1), dtype)


register_function("OneHot", _one_hot)


def _trilu(inputs, attrs, ctx):
    """Keep elements on or above (upper) / below (lower) diagonal k: col - row >= k / <= k."""
    x = inputs[0]
    k = inputs[1] if len(inputs) > 1 and inputs[1] is not None else _const(0, "int64")
    rows, cols = _static_shape(ctx, x, "Trilu")[-2:]
    offset = _const(np.arange(cols)[None, :] - np.arange(rows)[:, None], "int64")
    k = relay.cast(relay.reshape(k, []), "int64")
    keep = relay.greater_equal(offset, k) if attrs.get("upper", 1) else \
        relay.less_equal(offset, k)
    return relay.where(keep, x, relay.zeros_like(x))


register_function("Trilu", _trilu)


def _compress(inputs, attrs, ctx):
    x, condition = inputs
    value = ctx.value(condition)
    if value is None:  # the output length is known only at run time
        indices = relay.reshape(relay.cast(relay.argwhere(condition), "int64"), [-1])
    else:
        indices = _const(np.nonzero(value.reshape(-1))[0], "int64")
    axis = attrs.get("axis")
    if axis is None:
        return relay.take(relay.reshape(x, [-1]), indices, axis=0)
    return relay.take(x, indices, axis=axis)


register_function("Compress", _compress)


def _reverse_sequence(inputs, attrs, ctx):
    x, lengths = inputs
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    shape = _static_shape(ctx, x, "ReverseSequence")
    grid = np.indices(shape)
    time, batch = _const(grid[time_axis], "int64"), _const(grid[batch_axis], "int64")
    lens = relay.take(relay.cast(lengths, "int64"), batch)
    index = relay.where(relay.less(time, lens),
                        relay.subtract(relay.subtract(lens, _const(1, "int64")), time), time)
    return relay.gather(x, time_axis, index)


register_function("ReverseSequence", _reverse_sequence)


def _dropout(inputs, attrs, ctx):
    """Dropout at inference (identity, mask all true). Training mode with a non-zero ratio
    draws a random mask that no compiled program can reproduce bit for bit: refused."""
    x = inputs[0]
    ratio = ctx.value(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else \
        np.asarray(attrs.get("ratio", 0.5))
    training = np.asarray(False) if len(inputs) < 3 or inputs[2] is None else \
        ctx.value(inputs[2])
    if training is None or ratio is None and bool(training):
        raise unsupported("Dropout", "a training_mode or ratio known only at run time")
    if bool(training) and float(ratio) != 0.0:
        raise unsupported("Dropout", f"training mode with ratio {float(ratio)} (a random "
                          "mask; kiln runs dropout at inference)")
    if ctx.num_outputs > 1:
        return [x, relay.ones_like(relay.cast(x, "bool"))]
    return x


register_function("Dropout", _dropout)
