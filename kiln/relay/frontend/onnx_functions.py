"""ONNX ops defined by a function body: a node kiln has no converter for is expanded into the
body ONNX's schema gives for it (fixed or built from the node's attributes and input types),
and the body's nodes are converted in their own scope.

Entry points: :func:`has_function_body`, :func:`expand_function`.

This is how ONNX itself defines many newer ops (CausalConvWithState, LinearAttention,
CenterCropPad, AffineGrid, …): converting the body gives real Relay ops that every executor
compiles, with the op's semantics exactly as the standard writes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.frontend.onnx_registry import unsupported
from kiln.runtime.error import OpNotImplemented

__all__ = ["has_function_body", "expand_function"]


# other domains (ai.onnx.preview …) are versioned apart from the default one: their latest
# schema is used
_LATEST = 1 << 20


def _schema(op_type: str, opset: int, domain: str) -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(op_type, opset if domain in ("", "ai.onnx") else _LATEST,
                                    domain)
    except onnx.defs.SchemaError:
        return None


def has_function_body(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether ONNX defines ``op_type`` at ``opset`` by a (possibly context-dependent)
    function body."""
    schema = _schema(op_type, opset, domain)
    return schema is not None and (schema.has_function or
                                   schema.has_context_dependent_function)


def _input_type(ctx: Any, expr: Any) -> Any:
    """The ONNX TypeProto of a converted tensor value (unknown dims left symbolic)."""
    from onnx import helper

    if expr is None:
        import onnx

        return onnx.TypeProto()
    dims = [int(d) if isinstance(d, int | np.integer) else None for d in ctx.shape(expr)]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(ctx.dtype(expr)))
    return helper.make_tensor_type_proto(elem, dims)


def _body(node: Any, inputs: list, ctx: Any) -> Any:
    import onnx

    schema = _schema(node.op_type, ctx.opset, node.domain)
    if schema is None:
        return None
    if schema.has_context_dependent_function:
        types = [_input_type(ctx, x).SerializeToString() for x in inputs]
        raw = schema.get_context_dependent_function_with_opset_version(
            schema.since_version, node.SerializeToString(), types)
        if not raw:
            return None
        body = onnx.FunctionProto()
        body.ParseFromString(raw)
        return body
    return schema.function_body if schema.has_function else None


def _bind_attributes(inner: Any, caller: dict, defaults: dict) -> Any:
    """A copy of the body node ``inner`` whose attribute references (``ref_attr_name``) take
    the calling node's values; an attribute the caller omits falls back to the body's
    default or is left out (the inner op's own default then applies)."""
    import onnx

    bound = onnx.NodeProto()
    bound.CopyFrom(inner)
    del bound.attribute[:]
    for attr in inner.attribute:
        if not attr.ref_attr_name:
            bound.attribute.append(attr)
            continue
        source = caller.get(attr.ref_attr_name, defaults.get(attr.ref_attr_name))
        if source is None:
            continue
        copy = onnx.AttributeProto()
        copy.CopyFrom(source)
        copy.name = attr.name
        bound.attribute.append(copy)
    return bound


def expand_function(node: Any, inputs: list, ctx: Any) -> list:
    """Convert ``node`` through its ONNX function body; returns its outputs as Relay values.

    ``inputs`` are the node's converted inputs (None for omitted optional ones); the body's
    nodes are converted by a child of ``ctx`` that sees only the body's own names.
    """
    body = _body(node, inputs, ctx)
    if body is None:
        raise OpNotImplemented(f"ONNX op {node.op_type} (opset {ctx.opset}) is not "
                               "supported by kiln")
    opset = next((int(o.version) for o in body.opset_import if o.domain in ("", "ai.onnx")),
                 ctx.opset)
    scope = type(ctx)(opset=opset, freeze_params=ctx.freeze_params, parent=ctx)
    for formal, actual in zip(body.input, list(inputs) + [None] * len(body.input)):
        scope.values[formal] = actual
    caller = {attr.name: attr for attr in node.attribute}
    defaults = {attr.name: attr for attr in body.attribute_proto}
    for inner in body.node:
        scope.convert_node(_bind_attributes(inner, caller, defaults))
    outputs = []
    for name in body.output:
        if name not in scope.values:
            raise unsupported(node.op_type, f"a function body that never sets {name!r}")
        outputs.append(scope.values[name])
    return outputs
