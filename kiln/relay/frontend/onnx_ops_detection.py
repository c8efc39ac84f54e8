"""ONNX converters: object detection (NonMaxSuppression).

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

NonMaxSuppression is greedy selection, one candidate at a time, so it becomes a
tail-recursive Relay function over the candidates' rank (run by the VM and the interpreter),
vectorized across batches and classes: the pairwise "suppresses" matrix of each batch's boxes
is computed once, each step takes every (batch, class)'s next-best box, keeps it unless a box
already kept suppresses it or the class is full, and the kept boxes are read out with
``argwhere`` (a run-time number of rows) in ONNX's order: batch, class, descending score
(ties: lower box index first).

Example
-------
>>> from kiln.relay.frontend import onnx_ops_detection
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "NonMaxSuppression" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.expr import Call
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.runtime.error import OpAttributeInvalid, TVMError

__all__: list[str] = []


def _corners(boxes, center: bool):
    """``(y_min, x_min, y_max, x_max)`` of boxes ``(..., 4)``: ONNX's corner format takes any
    two opposite corners, the center format is ``(x_center, y_center, width, height)``."""
    parts = [relay.take(boxes, relay.const(k, "int32"), axis=-1) for k in range(4)]
    if center:
        xc, yc, w, h = parts
        half_w = relay.divide(w, relay.const(2.0, "float32"))
        half_h = relay.divide(h, relay.const(2.0, "float32"))
        return (relay.subtract(yc, half_h), relay.subtract(xc, half_w),
                relay.add(yc, half_h), relay.add(xc, half_w))
    y1, x1, y2, x2 = parts
    return (relay.minimum(y1, y2), relay.minimum(x1, x2), relay.maximum(y1, y2),
            relay.maximum(x1, x2))


def _suppresses(boxes, iou_threshold, center: bool):
    """``(B, N, N)`` bool: box i and box j overlap with IoU above the threshold (ONNX's
    reference: no overlap, an empty box or an empty union never suppresses)."""
    y0, x0, y1, x1 = _corners(boxes, center)

    def pair(v):  # (B, N, 1) against (B, 1, N)
        return relay.expand_dims(v, 2), relay.expand_dims(v, 1)

    (ya0, yb0), (xa0, xb0), (ya1, yb1), (xa1, xb1) = pair(y0), pair(x0), pair(y1), pair(x1)
    inter_h = relay.subtract(relay.minimum(ya1, yb1), relay.maximum(ya0, yb0))
    inter_w = relay.subtract(relay.minimum(xa1, xb1), relay.maximum(xa0, xb0))
    inter = relay.multiply(inter_w, inter_h)
    area_a = relay.multiply(relay.subtract(xa1, xa0), relay.subtract(ya1, ya0))
    area_b = relay.multiply(relay.subtract(xb1, xb0), relay.subtract(yb1, yb0))
    union = relay.subtract(relay.add(area_a, area_b), inter)
    zero = relay.const(0.0, "float32")
    valid = [relay.greater(inter_w, zero), relay.greater(inter_h, zero),
             relay.greater(inter, zero), relay.greater(area_a, zero),
             relay.greater(area_b, zero), relay.greater(union, zero)]
    above = relay.greater(relay.divide(inter, union), iou_threshold)
    for term in valid:
        above = relay.logical_and(above, term)
    return above


def _scalar_input(inputs, index, ctx, dtype, default):
    """Optional scalar input ``index`` as a 0-d expression of ``dtype`` (``default`` when
    omitted; None stays None for a default of None)."""
    x = inputs[index] if len(inputs) > index else None
    if x is None:
        return None if default is None else relay.const(np.array(default, dtype))
    return relay.reshape(relay.cast(x, dtype), [])


def _non_max_suppression(inputs, attrs, ctx):
    boxes, scores = inputs[0], inputs[1]
    center = attrs.get("center_point_box", 0)
    if center not in (0, 1):
        raise OpAttributeInvalid(f"ONNX NonMaxSuppression: center_point_box must be 0 or 1, "
                                 f"got {center}")
    b_shape, s_shape = ctx.shape(boxes), ctx.shape(scores)
    if not (is_static(b_shape) and is_static(s_shape)):
        raise unsupported("NonMaxSuppression", "boxes or scores of unknown shape")
    if len(b_shape) != 3 or b_shape[2] != 4 or len(s_shape) != 3 or \
            s_shape[0] != b_shape[0] or s_shape[2] != b_shape[1]:
        raise TVMError(f"NonMaxSuppression: boxes {list(b_shape)} must be [batch, boxes, 4] "
                       f"and scores {list(s_shape)} [batch, classes, boxes]")
    batch, classes, count = s_shape
    known = ctx.value(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else \
        np.zeros(1, "int64")  # omitted: ONNX's default selects nothing
    if known is not None and int(np.asarray(known).reshape(-1)[0]) <= 0 or count == 0:
        return relay.const(np.zeros((0, 3), "int64"))
    max_out = _scalar_input(inputs, 2, ctx, "int64", 0)
    boxes = relay.cast(boxes, "float32")
    scores = relay.cast(scores, "float32")
    iou = _scalar_input(inputs, 3, ctx, "float32", 0.0)
    score_threshold = _scalar_input(inputs, 4, ctx, "float32", None)
    suppress = _suppresses(boxes, iou, bool(center))
    # candidates by descending score; the sort is stable, so equal scores keep index order
    order = relay.argsort(relay.negative(scores), axis=2, dtype="int64")
    ranked = relay.gather(scores, 2, order)
    batch_index = relay.const(np.broadcast_to(np.arange(batch)[:, None], (batch, classes))
                              .astype("int64"))
    box_ids = relay.const(np.arange(count, dtype="int64"))

    rank = relay.var("rank", shape=(), dtype="int64")
    kept = relay.var("kept", shape=(batch, classes, count), dtype="bool")
    taken = relay.var("taken", shape=(batch, classes), dtype="int64")
    params = {name: relay.var(name, type_annotation=ctx_type)
              for name, ctx_type in [("order", relay.TensorType((batch, classes, count),
                                                                 "int64")),
                                     ("ranked", relay.TensorType((batch, classes, count),
                                                                 "float32")),
                                     ("suppress", relay.TensorType((batch, count, count),
                                                                   "bool")),
                                     ("max_out", relay.TensorType((), "int64"))]}
    if score_threshold is not None:
        params["threshold"] = relay.var("threshold", shape=(), dtype="float32")
    box = relay.take(params["order"], rank, axis=2)  # (B, C): each class's candidate
    row = relay.gather_nd(params["suppress"], relay.stack([batch_index, box], 0))
    blocked = relay.any(relay.logical_and(kept, row), axis=2)
    ok = relay.logical_and(relay.logical_not(blocked), relay.less(taken, params["max_out"]))
    if score_threshold is not None:
        score = relay.take(params["ranked"], rank, axis=2)
        ok = relay.logical_and(ok, relay.greater(score, params["threshold"]))
    mark = relay.logical_and(relay.equal(box_ids, relay.expand_dims(box, 2)),
                             relay.expand_dims(ok, 2))
    gvar = ctx.global_var("onnx_nms")
    step = Call(gvar, [relay.add(rank, relay.const(np.array(1, "int64"))),
                       relay.logical_or(kept, mark),
                       relay.add(taken, relay.cast(ok, "int64")), *params.values()])
    more = relay.less(rank, relay.const(np.array(count, "int64")))
    ctx.define_function(gvar, relay.Function([rank, kept, taken, *params.values()],
                                             relay.If(more, step, kept),
                                             relay.TensorType((batch, classes, count),
                                                              "bool")))
    actual = [order, ranked, suppress, max_out] + \
        ([score_threshold] if score_threshold is not None else [])
    selected = Call(gvar, [relay.const(np.array(0, "int64")),
                           relay.const(np.zeros((batch, classes, count), bool)),
                           relay.const(np.zeros((batch, classes), "int64")), *actual])
    # rows (batch, class, rank) in ONNX's order, then each rank's box index
    rows = relay.argwhere(relay.gather(selected, 2, order))
    rows = relay.cast(rows, "int64")
    strides = relay.const(np.array([classes * count, count, 1], "int64"))
    flat = relay.sum(relay.multiply(rows, strides), axis=1)
    picked = relay.take(relay.reshape(order, [-1]), flat)
    head = relay.strided_slice(rows, [0], [2], axes=[1])
    return relay.concatenate([head, relay.expand_dims(picked, 1)], 1)


register_function("NonMaxSuppression", _non_max_suppression, since=10)
