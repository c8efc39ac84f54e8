"""ONNX converters: Unique.

Entry points: the converter registered in :data:`~.onnx_registry.CONVERTERS` on import.

Unique sorts the elements (or, with ``axis``, the slices along it, lexicographically as
``np.unique`` does: one stable argsort per slice position, last position first), marks where
a sorted run starts, and reads the runs out with ``argwhere`` (a run-time count):
``Y`` and ``indices`` from each run's first element (the stable sort keeps the first
occurrence first), ``counts`` by scattering ones onto run ids, ``inverse_indices`` by
scattering run ids back through the sort. ``sorted=0`` reorders the runs by first occurrence.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_unique
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "Unique" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.runtime.error import OpAttributeInvalid

__all__: list[str] = []

_INT = "int64"


def _const(value):
    return relay.const(np.asarray(value, _INT))


def _lexicographic_order(rows, width: int):
    """A stable permutation sorting the ``(n, width)`` rows lexicographically."""
    order = relay.argsort(relay.take(rows, _const(width - 1), axis=1), dtype=_INT)
    for column in range(width - 2, -1, -1):
        keys = relay.take(relay.take(rows, _const(column), axis=1), order)
        order = relay.take(order, relay.argsort(keys, dtype=_INT))
    return order


def _unique(inputs, attrs, ctx):
    x = inputs[0]
    shape = ctx.shape(x)
    if not is_static(shape):
        raise unsupported("Unique", "an input of unknown shape")
    rank = len(shape)
    axis = attrs.get("axis")
    dtype = ctx.dtype(x)
    keys = relay.cast(x, "float32") if dtype in ("float16", "bfloat16") else x
    if axis is None:
        flat = relay.reshape(x, [-1])
        rows = relay.reshape(keys, [-1, 1])
        length, width, moved = int(np.prod(shape)), 1, None
    else:
        if not -rank <= axis < rank:
            raise OpAttributeInvalid(f"ONNX Unique: axis {axis} is out of range for rank "
                                     f"{rank}")
        axis = axis + rank if axis < 0 else axis
        moved = [axis] + [a for a in range(rank) if a != axis]
        flat = relay.transpose(x, moved)
        length = shape[axis]
        width = int(np.prod(shape)) // length if length else 0
        rows = relay.reshape(relay.transpose(keys, moved), [length, width])
    if length == 0 or width == 0:
        raise unsupported("Unique", "an empty input")
    order = _lexicographic_order(rows, width)
    ranked = relay.take(rows, order, axis=0)
    differs = relay.any(relay.not_equal(relay.strided_slice(ranked, [1], [length], axes=[0]),
                                        relay.strided_slice(ranked, [0], [length - 1],
                                                            axes=[0])), axis=1)
    starts_mask = relay.concatenate([relay.const(np.array([True])), differs], 0)
    run_id = relay.subtract(relay.cumsum(relay.cast(starts_mask, _INT), axis=0), _const(1))
    starts = relay.reshape(relay.cast(relay.argwhere(starts_mask), _INT), [-1])
    first = relay.take(order, starts)  # original index of each run's first element
    counts_all = relay.scatter_elements(relay.const(np.zeros(length, _INT)), run_id,
                                        relay.const(np.ones(length, _INT)), 0, "add")
    counts = relay.take(counts_all, relay.take(run_id, starts))
    inverse = relay.scatter_elements(relay.const(np.zeros(length, _INT)), order, run_id, 0)
    if not attrs.get("sorted", 1):  # runs in order of first occurrence
        by_first = relay.argsort(first, dtype=_INT)
        first, counts = relay.take(first, by_first), relay.take(counts, by_first)
        inverse = relay.take(relay.argsort(by_first, dtype=_INT), inverse)
    values = relay.take(flat, first, axis=0)
    if moved is not None:
        values = relay.transpose(values, np.argsort(moved).tolist())
    return [values, first, inverse, counts]


register_function("Unique", _unique, since=11)
