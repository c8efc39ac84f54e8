"""NumPy semantics of the Relay operators: the reference the interpreter and FoldConstant use.

Entry points: :func:`numpy_eval` (evaluate one operator call on NumPy values) and
:func:`register_numpy` (attach an implementation to an op as the ``"FNumpyEval"`` attribute).

An implementation is ``f(attrs, args, out_type) -> value`` where ``args`` are NumPy arrays (or
tuples of them for tuple-typed arguments), ``attrs`` the call's attrs node and ``out_type`` the
call's checked type (for dtypes and shapes an op does not carry in its attrs). Tensor results
are NumPy arrays; tuple results are Python tuples. These are written for clarity, not speed:
they are the oracle every compiled executor is tested against.

Integer division follows TIR: ``divide``/``mod``/``trunc_*`` truncate toward zero, ``floor_*``
round toward negative infinity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.ir.op import Op
from kiln.runtime.dtype import DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.topi.newshape import infer_newshape

__all__ = ["numpy_eval", "register_numpy", "np_dtype", "cast_array", "NUMPY_EVAL"]

NUMPY_EVAL = "FNumpyEval"


def register_numpy(*op_names: str) -> Callable:
    """Decorator: register ``f(attrs, args, out_type)`` as the NumPy semantics of ops."""

    def register(func: Callable) -> Callable:
        for name in op_names:
            Op.get(name).set_attr(NUMPY_EVAL, func)
        return func

    return register


def numpy_eval(op: Op, attrs: Any, args: list, out_type: Any) -> Any:
    """Evaluate ``op(*args)`` with NumPy; TVMError naming the op when it has no rule."""
    func = op.get_attr(NUMPY_EVAL)
    if func is None:
        raise TVMError(f"the reference interpreter has no NumPy implementation of {op.name}")
    return func(attrs, args, out_type)


def np_dtype(dtype: Any) -> np.dtype:
    return np.dtype(DataType(str(dtype)).numpy_dtype)


def _out_dtype(out_type: Any) -> np.dtype:
    return np_dtype(out_type.dtype)


def _axes(axis: Any, ndim: int, exclude: bool = False) -> tuple[int, ...]:
    if axis is None:
        axes = tuple(range(ndim))
    else:
        axes = tuple(int(a) % ndim if ndim else 0 for a in
                     (axis if isinstance(axis, list | tuple) else (axis,)))
    if exclude:
        axes = tuple(a for a in range(ndim) if a not in axes)
    return axes


# ---- elementwise --------------------------------------------------------------------------
# (the elementwise family's rules are in kiln/relay/op/tensor.py)
@register_numpy("nn.relu")
def _relu(attrs, args, out_type):
    return np.maximum(args[0], 0).astype(_out_dtype(out_type), copy=False)


@register_numpy("cast", "cast_like")
def _cast(attrs, args, out_type):
    return cast_array(args[0], DataType(out_type.dtype))


def cast_array(x: np.ndarray, dtype: DataType) -> np.ndarray:
    """Relay ``cast`` of ``x`` to ``dtype``: NumPy's ``astype``, except that the 8-bit floats
    saturate (ONNX Cast's default: NaN stays NaN, ±inf and finite values beyond the largest
    become ± that value), and that the ml_dtypes types (bfloat16, 8-bit floats, sub-byte
    integers) convert through float32, which holds each of them exactly. Integers narrower
    than a byte wrap (keep the low bits, as int8 does); a float becomes one by truncation
    toward zero, NaN and ±inf become 0."""
    target = dtype.numpy_dtype
    if _is_ml_dtype(DataType.from_numpy(x.dtype)) and x.dtype != target:
        x = x.astype(np.float32)
    if dtype.is_float8:
        import ml_dtypes

        largest = float(ml_dtypes.finfo(target).max)
        x = np.clip(x.astype(np.float64) if x.dtype.kind in "iub" else x, -largest, largest)
    elif _is_ml_dtype(dtype) and not dtype.is_float and x.dtype.kind == "f":
        x = np.where(np.isfinite(x), np.trunc(x), 0)
    return x.astype(target)


def _is_ml_dtype(t: DataType) -> bool:
    return t.is_float8 or t.type_code == DataTypeCode.BFLOAT or (t.bits < 8 and not t.is_bool)


@register_numpy("reinterpret")
def _reinterpret(attrs, args, out_type):
    return args[0].view(_out_dtype(out_type))


@register_numpy("where")
def _where(attrs, args, out_type):
    return np.where(args[0], args[1], args[2]).astype(_out_dtype(out_type))


@register_numpy("nn.leaky_relu")
def _leaky_relu(attrs, args, out_type):
    x = args[0]
    return np.where(x > 0, x, x * attrs.alpha).astype(x.dtype)


@register_numpy("nn.prelu")
def _prelu(attrs, args, out_type):
    x, alpha = args
    shape = [1] * x.ndim
    shape[attrs.axis % x.ndim] = -1
    return np.where(x > 0, x, x * alpha.reshape(shape)).astype(x.dtype)


@register_numpy("nn.bias_add")
def _bias_add(attrs, args, out_type):
    x, bias = args
    shape = [1] * x.ndim
    shape[attrs.axis % x.ndim] = -1
    return (x + bias.reshape(shape)).astype(x.dtype)


@register_numpy("nn.dropout")
def _dropout(attrs, args, out_type):
    x = args[0]
    return x, np.ones_like(x)


# ---- shape and layout ---------------------------------------------------------------------
def _static_shape(out_type: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in out_type.shape)


@register_numpy("nn.batch_flatten")
def _batch_flatten(attrs, args, out_type):
    return np.reshape(args[0], (args[0].shape[0], -1))


@register_numpy("concatenate")
def _concatenate(attrs, args, out_type):
    return np.concatenate(args[0], axis=attrs.axis)


@register_numpy("stack")
def _stack(attrs, args, out_type):
    return np.stack(args[0], axis=attrs.axis)


@register_numpy("split")
def _split(attrs, args, out_type):
    sections = attrs.indices_or_sections
    if not isinstance(sections, list | tuple):
        sections = int(sections)
    else:
        sections = [int(s) for s in sections]
    return tuple(np.split(args[0], sections, axis=attrs.axis))


@register_numpy("broadcast_to", "broadcast_to_like")
def _broadcast_to(attrs, args, out_type):
    return np.broadcast_to(args[0], _static_shape(out_type)).copy()


@register_numpy("collapse_sum_like", "collapse_sum_to")
def _collapse_sum(attrs, args, out_type):
    x, shape = args[0], _static_shape(out_type)
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def _fill_shape(attrs, args, out_type) -> tuple[int, ...]:
    """The shape of a fill op: the ``*_like`` argument's, else the attrs', else the type's."""
    if args and isinstance(args[0], np.ndarray) and getattr(attrs, "shape", None) is None:
        return args[0].shape
    shape = getattr(attrs, "shape", None)
    return tuple(int(d) for d in shape) if shape is not None else _static_shape(out_type)


@register_numpy("full", "full_like")
def _full(attrs, args, out_type):
    fill_value = np.asarray(args[-1]).item()
    shape = args[0].shape if len(args) == 2 else _fill_shape(attrs, [], out_type)
    return np.full(shape, fill_value, dtype=_out_dtype(out_type))


@register_numpy("tile")
def _tile(attrs, args, out_type):
    return np.tile(args[0], [int(r) for r in attrs.reps])


@register_numpy("repeat")
def _repeat(attrs, args, out_type):
    return np.repeat(args[0], int(attrs.repeats), axis=attrs.axis)


@register_numpy("reverse")
def _reverse(attrs, args, out_type):
    return np.flip(args[0], axis=attrs.axis)


@register_numpy("take")
def _take(attrs, args, out_type):
    data, indices = args
    axis = attrs.axis
    if axis is None:
        data, axis = data.reshape(-1), 0
    axis = int(axis) % data.ndim
    n = data.shape[axis]
    if attrs.mode == "clip":
        indices = np.clip(indices, 0, n - 1)
    elif attrs.mode == "wrap":
        indices = np.mod(indices, n)
    else:  # "fast": assumed in range; negative indices count from the end
        indices = np.where(indices < 0, indices + n, indices)
    if attrs.batch_dims:
        raise TVMError("take with batch_dims has no NumPy reference implementation")
    return np.take(data, indices.astype(np.int64), axis=axis)


@register_numpy("gather")
def _gather(attrs, args, out_type):
    data, indices = args
    return np.take_along_axis(data, indices.astype(np.int64), axis=attrs.axis)


@register_numpy("gather_nd")
def _gather_nd(attrs, args, out_type):
    data, indices = args
    b = int(attrs.batch_dims or 0)
    m = indices.shape[0]
    out_shape = _static_shape(out_type)
    flat = indices.reshape(m, -1).astype(np.int64)
    batch = data.shape[:b]
    results = []
    for j in range(flat.shape[1]):
        idx = tuple(flat[:, j])
        if b:
            bidx = np.unravel_index(j % int(np.prod(batch)), batch)
            results.append(data[bidx + idx])
        else:
            results.append(data[idx])
    return np.array(results, dtype=data.dtype).reshape(out_shape)


@register_numpy("strided_slice")
def _strided_slice(attrs, args, out_type):
    data = args[0]
    begin, end = list(attrs.begin), list(attrs.end)
    strides = list(attrs.strides) if attrs.strides else [1] * len(begin)
    axes = list(attrs.axes) if attrs.axes is not None else list(range(len(begin)))
    slices = [slice(None)] * data.ndim
    for k, axis in enumerate(axes):
        stride = int(strides[k]) if k < len(strides) else int(strides[-1])
        b = int(begin[k])
        if attrs.slice_mode == "size":
            size = int(end[k])
            e = data.shape[axis] if size < 0 else b + size
            stride = 1
        else:
            e = int(end[k]) if k < len(end) else data.shape[axis]
        n = data.shape[axis]
        if stride < 0:
            b = min(b if b >= 0 else b + n, n - 1)
            e = e + n if e < -1 else (None if e < 0 else e)
        slices[axis] = slice(b, e if e is None or e < 2**62 else None, stride)
    return data[tuple(slices)].copy()


@register_numpy("slice_like")
def _slice_like(attrs, args, out_type):
    return args[0][tuple(slice(0, n) for n in _static_shape(out_type))].copy()


@register_numpy("one_hot")
def _one_hot(attrs, args, out_type):
    indices, on, off = args
    depth, axis = int(attrs.depth), int(attrs.axis)
    eye = np.arange(depth)
    hot = np.expand_dims(indices, -1) == eye
    out = np.where(hot, on, off).astype(_out_dtype(out_type))
    return np.moveaxis(out, -1, axis if axis >= 0 else out.ndim + axis)


@register_numpy("arange")
def _arange(attrs, args, out_type):
    start, stop, step = (np.asarray(a).item() for a in args)
    return np.arange(start, stop, step).astype(_out_dtype(out_type))


@register_numpy("sequence_mask")
def _sequence_mask(attrs, args, out_type):
    data, lengths = args
    axis = int(attrs.axis)
    steps = np.arange(data.shape[axis])
    shape = [1] * data.ndim
    shape[axis] = -1
    batch_axis = 1 - axis
    lshape = [1] * data.ndim
    lshape[batch_axis] = -1
    mask = steps.reshape(shape) < lengths.reshape(lshape)
    return np.where(mask, data, np.asarray(attrs.mask_value, dtype=data.dtype))


def _scan(func: Callable, identity: int) -> Callable:
    def impl(attrs, args, out_type):
        x = args[0].astype(_out_dtype(out_type))
        axis = attrs.axis
        if axis is None:
            x, axis = x.reshape(-1), 0
        out = func(x, axis=int(axis)).astype(x.dtype)  # NumPy widens int32 sums
        if attrs.exclusive:
            out = np.concatenate(
                [np.full_like(np.take(out, [0], axis=axis), identity),
                 np.delete(out, -1, axis=axis) if out.shape[axis] else out], axis=axis)
        return out

    return impl


register_numpy("cumsum")(_scan(np.cumsum, 0))
register_numpy("cumprod")(_scan(np.cumprod, 1))


@register_numpy("sort")
def _sort(attrs, args, out_type):
    out = np.sort(args[0], axis=attrs.axis, kind="stable")
    return out if attrs.is_ascend else np.flip(out, axis=attrs.axis)


def _stable_argsort(x: np.ndarray, axis: int, ascend: bool) -> np.ndarray:
    """Stable order (ties by position); NaN is the largest key, as in the compiled kernels
    (last ascending, first descending)."""
    order = np.argsort(x if ascend else -x.astype(np.float64) if x.dtype != bool else ~x,
                       axis=axis, kind="stable")
    if ascend or x.dtype.kind not in "fc":
        return order
    # descending: -NaN sorted last; move the NaNs to the front, keeping both groups' order
    not_nan = ~np.isnan(np.take_along_axis(x, order, axis=axis))
    return np.take_along_axis(order, np.argsort(not_nan, axis=axis, kind="stable"), axis=axis)


@register_numpy("argsort")
def _argsort(attrs, args, out_type):
    return _stable_argsort(args[0], attrs.axis, attrs.is_ascend).astype(np_dtype(attrs.dtype))


@register_numpy("topk")
def _topk(attrs, args, out_type):
    x = args[0]
    axis = int(attrs.axis) % x.ndim
    k = int(attrs.k) if attrs.k is not None and int(attrs.k) > 0 else x.shape[axis]
    order = _stable_argsort(x, axis, attrs.is_ascend)
    idx = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, idx, axis=axis)
    indices = idx.astype(np_dtype(attrs.dtype))
    return {"both": (values, indices), "values": values, "indices": indices}[attrs.ret_type]


@register_numpy("argwhere")
def _argwhere(attrs, args, out_type):
    return np.argwhere(args[0]).astype(_out_dtype(out_type))


@register_numpy("scatter_elements")
def _scatter_elements(attrs, args, out_type):
    data, indices, updates = args
    out = data.copy()
    axis = int(attrs.axis) % data.ndim
    reduce = {"update": None, "add": np.add, "mul": np.multiply, "min": np.minimum,
              "max": np.maximum, "mean": None}[attrs.reduction]
    for pos in np.ndindex(indices.shape):
        target = list(pos)
        i = int(indices[pos])
        target[axis] = i + data.shape[axis] if i < 0 else i
        target = tuple(target)
        out[target] = updates[pos] if reduce is None else reduce(out[target], updates[pos])
    return out


@register_numpy("scatter_nd")
def _scatter_nd(attrs, args, out_type):
    data, indices, updates = args
    out = data.copy()
    m = indices.shape[0]
    flat_idx = indices.reshape(m, -1).astype(np.int64)
    flat_upd = updates.reshape((flat_idx.shape[1],) + data.shape[m:])
    combine = {"update": lambda old, new: new, "add": np.add, "mul": np.multiply,
               "min": np.minimum, "max": np.maximum}.get(attrs.mode)
    if combine is None:
        raise TVMError(f"scatter_nd: unknown mode {attrs.mode!r}")
    for j in range(flat_idx.shape[1]):
        target = tuple(flat_idx[:, j])
        out[target] = combine(out[target], flat_upd[j])
    return out


@register_numpy("layout_transform")
def _layout_transform(attrs, args, out_type):
    from kiln.relay.backend.numpy_layout import layout_transform

    return layout_transform(args[0], attrs.src_layout, attrs.dst_layout)


# ---- dynamic-shape variants: the shape-like argument is data ------------------------------
class _With:
    """A view of an attrs node with some fields replaced (dyn ops take them as arguments)."""

    def __init__(self, attrs: Any, **fields: Any) -> None:
        self._attrs, self._fields = attrs, fields

    def __getattr__(self, name: str) -> Any:
        if name in self._fields:
            return self._fields[name]
        return getattr(self._attrs, name)


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


@register_numpy("dyn.reshape")
def _dyn_reshape(attrs, args, out_type):
    return np.reshape(args[0], infer_newshape(args[0].shape, _ints(args[1]),
                                              bool(getattr(attrs, "allowzero", False))))


@register_numpy("dyn.broadcast_to")
def _dyn_broadcast_to(attrs, args, out_type):
    return np.broadcast_to(args[0], _ints(args[1])).copy()


@register_numpy("dyn.zeros")
def _dyn_zeros(attrs, args, out_type):
    return np.zeros(_ints(args[0]), dtype=np_dtype(attrs.dtype))


@register_numpy("dyn.ones")
def _dyn_ones(attrs, args, out_type):
    return np.ones(_ints(args[0]), dtype=np_dtype(attrs.dtype))


@register_numpy("dyn.full")
def _dyn_full(attrs, args, out_type):
    return np.full(_ints(args[1]), np.asarray(args[0]).item(), dtype=np_dtype(attrs.dtype))


@register_numpy("dyn.expand_dims")
def _dyn_expand_dims(attrs, args, out_type):
    x, axis = args[0], int(np.asarray(args[1]).item())
    axis = axis if axis >= 0 else x.ndim + axis + 1
    for _ in range(int(attrs.num_newaxis)):
        x = np.expand_dims(x, axis)
    return x


@register_numpy("dyn.squeeze")
def _dyn_squeeze(attrs, args, out_type):
    return np.squeeze(args[0], axis=tuple(_ints(args[1])))


@register_numpy("dyn.tile")
def _dyn_tile(attrs, args, out_type):
    return np.tile(args[0], _ints(args[1]))


@register_numpy("dyn.one_hot")
def _dyn_one_hot(attrs, args, out_type):
    depth = int(np.asarray(args[3]).item())
    return _one_hot(_With(attrs, depth=depth), args[:3], out_type)


@register_numpy("dyn.strided_slice")
def _dyn_strided_slice(attrs, args, out_type):
    data, begin, end, strides = args
    return _strided_slice(_With(attrs, begin=_ints(begin), end=_ints(end),
                                strides=_ints(strides), axes=None), [data], out_type)


@register_numpy("dyn.topk")
def _dyn_topk(attrs, args, out_type):
    return _topk(_With(attrs, k=int(np.asarray(args[1]).item())), args[:1], out_type)


@register_numpy("dyn.nn.pad")
def _dyn_pad(attrs, args, out_type):
    data, width, value = args
    pairs = np.asarray(width).reshape(-1, 2).tolist()
    from kiln.relay.backend.numpy_nn import _pad

    return _pad(_With(attrs, pad_width=pairs), [data, value], out_type)


@register_numpy("dyn.image.resize2d")
def _dyn_resize2d(attrs, args, out_type):
    from kiln.relay.backend.numpy_nn import _resize

    data, size, roi = args
    if any(v < 0 for v in _ints(size)):
        raise TVMError(f"dyn.image.resize2d: sizes must be non-negative, got {_ints(size)}")
    return _resize(_With(attrs, size=_ints(size), roi=[float(v) for v in np.ravel(roi)]),
                   [data], out_type, 2)


@register_numpy("dyn.nn.upsampling")
def _dyn_upsampling(attrs, args, out_type):
    from kiln.relay.backend.numpy_nn import _upsampling

    data, scale_h, scale_w = args
    return _upsampling(_With(attrs, scale_h=float(np.asarray(scale_h).item()),
                             scale_w=float(np.asarray(scale_w).item())), [data], out_type)


# ---- annotations evaluate to their argument -------------------------------------------------
@register_numpy("on_device", "device_copy", "annotation.stop_fusion", "annotation.checkpoint",
                "annotation.cast_hint", "annotation.compiler_begin", "annotation.compiler_end",
                "annotation.bitpack_start", "annotation.bitpack_end", "debug")
def _identity(attrs, args, out_type):
    return args[0]
