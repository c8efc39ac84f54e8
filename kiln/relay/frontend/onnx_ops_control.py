"""ONNX converters: control flow (If, Loop, Scan).

Entry points: the converters registered in :data:`~.onnx_registry.CONVERTERS` on import.

``If`` becomes a Relay ``If`` (or just the taken branch when the condition is a constant).
``Loop`` is unrolled when its trip count and condition fold to constants (the body subgraph is
converted once per iteration with the previous iteration's values); otherwise it becomes a
tail-recursive global function (run by the interpreter or the VM). ``Scan`` is unrolled over
its statically known length; scan outputs are stacked along their scan axis.

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
from kiln.relay.frontend.common import AnyDim, is_static
from kiln.relay.frontend.onnx_registry import register_function, unsupported
from kiln.runtime.error import OpNotImplemented

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
    cond_known = len(inputs) < 2 or inputs[1] is None or ctx.value(inputs[1]) is not None
    if inputs and inputs[0] is not None and trip_count is None or not cond_known:
        return _recursive_loop(inputs, body, ctx)
    try:
        return _unrolled_loop(inputs, body, trip_count, ctx)
    except OpNotImplemented:
        return _recursive_loop(inputs, body, ctx)


def _unrolled_loop(inputs, body, trip_count, ctx):
    limit = int(trip_count.reshape(-1)[0]) if trip_count is not None else MAX_UNROLL
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else \
        relay.const(np.array(True))
    carried = list(inputs[2:])
    scans: list[list] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    iteration = 0
    while iteration < limit:
        cond_value = ctx.value(cond)
        if cond_value is None:
            raise unsupported("Loop", "an unrolled loop condition computed at run time")
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


def _recursive_loop(inputs, body, ctx):
    """Loop as a tail-recursive global function ``@loop(i, max, cond, carried..., scans...,
    captured...)``: a Relay If either calls itself with the body's results (scan outputs
    concatenated on a leading axis of unknown length) or returns the carried values."""
    from kiln.ir.type import TensorType, TupleType
    from kiln.relay.analysis import free_vars
    from kiln.relay.expr import Call, bind

    carried = list(inputs[2:])
    from kiln.relay.frontend.common import infer_type

    if any(not isinstance(infer_type(v, ctx.module), TensorType) for v in carried):
        raise unsupported("Loop", "a sequence or optional carried through a loop whose trip "
                          "count or condition is known only at run time")
    i = relay.var("i", shape=(), dtype="int64")
    limit = relay.var("max", shape=(), dtype="int64")
    cond = relay.var("cond", shape=(), dtype="bool")
    state = [relay.var(f"v{k}", shape=ctx.shape(v), dtype=ctx.dtype(v))
             for k, v in enumerate(carried)]
    outputs = ctx.convert_subgraph(body, [i, cond, *state])
    cond_out, carried_out = outputs[0], outputs[1:1 + len(state)]
    scan_out = outputs[1 + len(state):]
    scan_shapes = [ctx.shape(s) for s in scan_out]
    declared = [[d.dim_value for d in out.type.tensor_type.shape.dim]
                for out in body.output[1 + len(state):]]
    # the empty initial accumulators need concrete element shapes: the body's declared ones
    empty_shapes = [[d if isinstance(d, int) else (decl[k] if k < len(decl) and decl[k] > 0
                                                   else None)
                     for k, d in enumerate(shape)] for shape, decl in zip(scan_shapes, declared)]
    if any(None in shape for shape in empty_shapes):
        raise unsupported("Loop", "scan outputs of unknown shape")
    scans = [relay.var(f"scan{k}", shape=(AnyDim(), *shape), dtype=ctx.dtype(s))
             for k, (s, shape) in enumerate(zip(scan_out, scan_shapes))]
    own = {i, limit, cond, *state, *scans}
    captured = [v for v in free_vars(relay.Tuple([cond_out, *carried_out, *scan_out]))
                if v not in own]
    fresh = {v: relay.var(v.name_hint, v.type_annotation) for v in captured}
    gvar = ctx.global_var("onnx_loop")
    step = Call(gvar, [
        relay.add(i, relay.const(np.array(1, "int64"))), limit,
        relay.reshape(relay.cast(cond_out, "bool"), []), *carried_out,
        *(relay.concatenate([acc, _leading_axis(s, shape)], 0)
          for acc, s, shape in zip(scans, scan_out, scan_shapes)), *fresh])
    step = bind(step, fresh) if fresh else step
    done = relay.Tuple([*state, *scans])
    keep_going = relay.logical_and(cond, relay.less(i, limit))
    ret_type = TupleType([TensorType(ctx.shape(v), ctx.dtype(v)) for v in state] +
                         [TensorType((AnyDim(), *shape), ctx.dtype(s))
                          for s, shape in zip(scan_out, scan_shapes)])
    ctx.define_function(gvar, relay.Function(
        [i, limit, cond, *state, *scans, *fresh.values()], relay.If(keep_going, step, done),
        ret_type))
    max_count = inputs[0] if inputs and inputs[0] is not None else \
        relay.const(np.array(np.iinfo(np.int64).max, "int64"))
    start_cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else \
        relay.const(np.array(True))
    empties = [relay.const(np.zeros((0, *shape), ctx.dtype(s)))
               for s, shape in zip(scan_out, empty_shapes)]
    result = Call(gvar, [relay.const(np.array(0, "int64")),
                         relay.reshape(relay.cast(max_count, "int64"), []),
                         relay.reshape(relay.cast(start_cond, "bool"), []),
                         *carried, *empties, *captured])
    return [relay.TupleGetItem(result, k) for k in range(len(state) + len(scans))]


def _leading_axis(x, shape):
    """``x`` with a new leading axis of length 1 (a dynamic reshape for unknown dims)."""
    if is_static(shape):
        return relay.expand_dims(x, 0)
    new_shape = relay.concatenate([relay.const(np.array([1], "int64")),
                                   relay.shape_of(x, "int64")], 0)
    return relay.reshape(x, new_shape)


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
