"""ONNX converters: ops that write values to computed positions (TensorScatter, MaxUnpool).

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

TensorScatter (a KV-cache update) reads, for every cache position along ``axis``, which
update row lands there (the batch's write index subtracted, modulo the cache length when
``circular``) and takes it with ``gather`` where one does, the old cache elsewhere.
MaxUnpool scatters the pooled values to their flat indices (MaxPool's ``Indices``, which count
over the whole unpooled tensor) in a zero tensor of the inferred unpooled shape, then pads to
``output_shape`` when given (a run-time shape gives a dynamic pad).

Example
-------
>>> from kiln.relay.frontend import onnx_ops_scatter
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "TensorScatter" in CONVERTERS and "MaxUnpool" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, required, unsupported
from kiln.runtime.error import OpAttributeInvalid, TVMError

__all__: list[str] = []


def _tensor_scatter(inputs, attrs, ctx):
    cache, update = inputs[0], inputs[1]
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise OpAttributeInvalid(f"ONNX TensorScatter: mode must be 'linear' or 'circular', "
                                 f"got {mode!r}")
    shape, u_shape = ctx.shape(cache), ctx.shape(update)
    if not (is_static(shape) and is_static(u_shape)):
        raise unsupported("TensorScatter", "a cache or update of unknown shape")
    rank = len(shape)
    axis = attrs.get("axis", -2)
    if not -rank < axis < rank or axis % rank == 0:
        raise OpAttributeInvalid(f"ONNX TensorScatter: axis {axis} must name a non-batch axis "
                                 f"of the rank-{rank} cache")
    axis %= rank
    if len(u_shape) != rank or any(a != b for k, (a, b) in enumerate(zip(shape, u_shape))
                                   if k != axis) or u_shape[axis] > shape[axis]:
        raise TVMError(f"TensorScatter: update {list(u_shape)} does not fit cache "
                       f"{list(shape)} along axis {axis}")
    length, rows = shape[axis], u_shape[axis]
    indices = inputs[2] if len(inputs) > 2 and inputs[2] is not None else \
        relay.const(np.zeros(shape[0], "int64"))
    start = relay.reshape(relay.cast(indices, "int64"), [shape[0], 1])
    offset = relay.subtract(relay.const(np.arange(length, dtype="int64").reshape(1, -1)),
                            start)  # (batch, cache position): the update row landing there
    if mode == "circular":
        offset = relay.floor_mod(offset, relay.const(np.array(length, "int64")))
    hit = relay.logical_and(relay.greater_equal(offset, relay.const(np.array(0, "int64"))),
                            relay.less(offset, relay.const(np.array(rows, "int64"))))
    # (batch, 1, ..., position, 1, ...) broadcast over the cache's other axes
    layout = [shape[0]] + [length if k == axis else 1 for k in range(1, rank)]
    offset, hit = (relay.broadcast_to(relay.reshape(t, layout), list(shape))
                   for t in (offset, hit))
    row = relay.clip(offset, 0, rows - 1)
    return relay.where(hit, relay.gather(update, axis, row), cache)


def _max_unpool(inputs, attrs, ctx):
    x, indices = inputs[0], inputs[1]
    shape = ctx.shape(x)
    if not is_static(shape):
        raise unsupported("MaxUnpool", "an input of unknown shape")
    kernel = list(required(attrs, "kernel_shape", "MaxUnpool"))
    spatial = len(shape) - 2
    if len(kernel) != spatial:
        raise OpAttributeInvalid(f"ONNX MaxUnpool: kernel_shape {kernel} for a "
                                 f"{spatial}-D input")
    strides = list(attrs.get("strides", [1] * spatial))
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    inferred = list(shape[:2]) + [(shape[2 + d] - 1) * strides[d] - pads[d] - pads[spatial + d]
                                  + kernel[d] for d in range(spatial)]
    if any(d <= 0 for d in inferred):
        raise OpAttributeInvalid(f"ONNX MaxUnpool: the unpooled shape {inferred} is empty")
    size = int(np.prod(inferred))
    flat = relay.scatter_elements(relay.const(np.zeros(size, ctx.dtype(x))),
                                  relay.reshape(relay.cast(indices, "int64"), [-1]),
                                  relay.reshape(x, [-1]), 0)
    y = relay.reshape(flat, inferred)
    target = inputs[2] if len(inputs) > 2 else None
    if target is None:
        return y
    known = ctx.value(target)
    if known is not None:
        extra = [int(t) - i for t, i in zip(np.asarray(known).reshape(-1), inferred)]
        if len(extra) != len(inferred) or min(extra) < 0:
            raise OpAttributeInvalid(f"ONNX MaxUnpool: output_shape {known.tolist()} is "
                                     f"smaller than the unpooled shape {inferred}")
        return relay.nn.pad(y, [(0, e) for e in extra])
    extra = relay.subtract(relay.cast(target, "int64"),
                           relay.const(np.array(inferred, "int64")))
    widths = relay.stack([relay.zeros_like(extra), extra], 1)  # (rank, 2): pad after only
    return relay.nn.pad(y, widths)


register_function("TensorScatter", _tensor_scatter, since=24)
register_function("MaxUnpool", _max_unpool, since=9)
