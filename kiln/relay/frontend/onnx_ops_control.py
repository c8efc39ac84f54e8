"""ONNX converters: control flow (If, Loop, Scan).

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

``If`` becomes a Relay ``If`` (or just the taken branch when the condition is a constant).
``Loop`` and ``Scan`` are unrolled: the body subgraph is converted once per iteration with the
loop-carried values of the previous one, which needs the trip count (Loop: the ``M`` input, or
a loop condition that folds to a constant each iteration) and the scanned length (Scan) known
when the model is converted; scan outputs are stacked along their scan axis.

Example
-------
>>> from kiln.relay.frontend import onnx_ops_control
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "If" in CONVERTERS and "Loop" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported

__all__: list[str] = []

MAX_UNROLL = 4096


def _if(inputs, attrs, ctx):
    cond = inputs[0]
    value = ctx.value(cond)
    if value is not None:
        branch = attrs["then_branch"] if bool(value.reshape(-1)[0]) else attrs["else_branch"]
        return ctx.convert_subgraph(branch, [])
    then_outs = ctx.convert_subgraph(attrs["then_branch"], [])
    else_outs = ctx.convert_subgraph(attrs["else_branch"], [])
    scalar = relay.reshape(cond, [])
    if len(then_outs) == 1:
        return relay.If(scalar, then_outs[0], else_outs[0])
    result = relay.If(scalar, relay.Tuple(then_outs), relay.Tuple(else_outs))
    return [relay.TupleGetItem(result, i) for i in range(len(then_outs))]


def _loop(inputs, attrs, ctx):
    body = attrs["body"]
    trip_count = ctx.value(inputs[0]) if inputs and inputs[0] is not None else None
    if inputs and inputs[0] is not None and trip_count is None:
        raise unsupported("Loop", "a trip count computed at run time")
    limit = int(trip_count.reshape(-1)[0]) if trip_count is not None else MAX_UNROLL
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else \
        relay.const(np.array(True))
    carried = list(inputs[2:])
    scans: list[list] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    iteration = 0
    while iteration < limit:
        cond_value = ctx.value(cond)
        if cond_value is None:
            raise unsupported("Loop", "a loop condition computed at run time")
        if not bool(cond_value.reshape(-1)[0]):
            break
        outputs = ctx.convert_subgraph(body, [relay.const(np.array(iteration, "int64")),
                                              cond, *carried])
        cond, carried = outputs[0], outputs[1:1 + len(carried)]
        for scan, value in zip(scans, outputs[1 + len(carried):]):
            scan.append(value)
        iteration += 1
    if trip_count is None and iteration == MAX_UNROLL:
        raise unsupported("Loop", f"more than {MAX_UNROLL} iterations")
    if any(not scan for scan in scans):
        raise unsupported("Loop", "scan outputs of a loop that runs zero times")
    return [*carried, *(relay.stack(scan, 0) for scan in scans)]


def _scan(inputs, attrs, ctx):
    body = attrs["body"]
    num_scan = attrs["num_scan_inputs"]
    states = list(inputs[:len(inputs) - num_scan])
    scanned = inputs[len(inputs) - num_scan:]
    in_axes = list(attrs.get("scan_input_axes", [0] * num_scan))
    in_dirs = list(attrs.get("scan_input_directions", [0] * num_scan))
    num_out = len(body.output) - len(states)
    out_axes = list(attrs.get("scan_output_axes", [0] * num_out))
    out_dirs = list(attrs.get("scan_output_directions", [0] * num_out))
    shapes = [ctx.shape(x) for x in scanned]
    in_axes = [a + len(s) if a < 0 else a for a, s in zip(in_axes, shapes)]
    lengths = {s[a] for s, a in zip(shapes, in_axes)}
    if len(lengths) != 1 or not is_static(tuple(lengths)):
        raise unsupported("Scan", "scan inputs of unknown or differing lengths")
    steps = lengths.pop()
    slices = []
    for x, axis, reverse in zip(scanned, in_axes, in_dirs):
        pieces = [relay.take(x, relay.const(np.array(t, "int64")), axis=axis)
                  for t in range(steps)]
        slices.append(pieces[::-1] if reverse else pieces)
    collected: list[list] = [[] for _ in range(num_out)]
    for t in range(steps):
        outputs = ctx.convert_subgraph(body, [*states, *(s[t] for s in slices)])
        states = outputs[:len(states)]
        for bucket, value in zip(collected, outputs[len(states):]):
            bucket.append(value)
    results = []
    for bucket, axis, reverse in zip(collected, out_axes, out_dirs):
        bucket = bucket[::-1] if reverse else bucket
        rank = ctx.rank(bucket[0]) + 1
        results.append(relay.stack(bucket, axis + rank if axis < 0 else axis))
    return [*states, *results]


register_function("If", _if)
register_function("Loop", _loop)
register_function("Scan", _scan, since=9)
