"""TFLite element-wise operators: binary arithmetic, activations, softmax, (de)quantization.

Entry points: the converters registered into :data:`.tflite_ops.CONVERTERS`.

Quantized ADD/SUB/MUL map onto ``qnn.add/subtract/mul``; MAXIMUM/MINIMUM and the ReLU family
stay integer (TFLite requires or requantizes to the output's parameters); the transcendental
ops go dequantize -> float op -> quantize, as TVM's frontend does.
"""

from __future__ import annotations

from kiln import relay
from kiln.relay.frontend.tflite_ops import (
    ACT_RELU,
    ACT_RELU6,
    ACT_RELU_N1_TO_1,
    dequantize,
    fused_activation,
    inputs_of,
    is_quantized,
    option,
    quantize,
    register,
    requantize_to,
    require_quant,
)
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented

__all__: list[str] = []


def _hard_swish(x):
    three, six = relay.const(3.0), relay.const(6.0)
    return relay.divide(relay.multiply(x, relay.clip(relay.add(x, three), 0.0, 6.0)), six)


def _elu(x):
    return relay.where(relay.greater(x, relay.const(0.0)), x,
                       relay.subtract(relay.exp(x), relay.const(1.0)))


# float unary ops; the quantized forms dequantize, apply these, and quantize
UNARY = {
    "LOGISTIC": relay.sigmoid, "TANH": relay.tanh, "EXP": relay.exp, "LOG": relay.log,
    "SQRT": relay.sqrt, "RSQRT": relay.rsqrt, "ABS": relay.abs, "NEG": relay.negative,
    "SIN": relay.sin, "COS": relay.cos, "FLOOR": relay.floor, "CEIL": relay.ceil,
    "ROUND": relay.round, "SQUARE": lambda x: relay.multiply(x, x),
    "HARD_SWISH": _hard_swish, "ELU": _elu,
}


@register(*UNARY)
def convert_unary(conv, op):
    inputs_of(op, 1)
    fn = UNARY[op.name]
    x = conv.get_expr(op.inputs[0])
    if not is_quantized(conv, op):
        return fn(x)
    return quantize(conv, fn(dequantize(conv, x, op.inputs[0])), op.outputs[0])


@register("LEAKY_RELU")
def convert_leaky_relu(conv, op):
    inputs_of(op, 1)
    alpha = float(option(op, "Alpha", 0.2))
    x = conv.get_expr(op.inputs[0])
    if not is_quantized(conv, op):
        return relay.nn.leaky_relu(x, alpha)
    y = relay.nn.leaky_relu(dequantize(conv, x, op.inputs[0]), alpha)
    return quantize(conv, y, op.outputs[0])


RELU_ACTIVATION = {"RELU": ACT_RELU, "RELU6": ACT_RELU6, "RELU_N1_TO_1": ACT_RELU_N1_TO_1}


@register(*RELU_ACTIVATION)
def convert_relu(conv, op):
    """The ReLU family: a clip, in the output's quantized domain for quantized tensors."""
    inputs_of(op, 1)
    x = conv.get_expr(op.inputs[0])
    if is_quantized(conv, op):
        x = requantize_to(conv, x, op.inputs[0], op.outputs[0])
    return fused_activation(conv, x, RELU_ACTIVATION[op.name], op.outputs[0])


@register("SOFTMAX", "LOG_SOFTMAX")
def convert_softmax(conv, op):
    inputs_of(op, 1)
    x = conv.get_expr(op.inputs[0])
    quantized = is_quantized(conv, op)
    if quantized:
        x = dequantize(conv, x, op.inputs[0])
    beta = float(option(op, "Beta", 1.0)) if op.name == "SOFTMAX" else 1.0
    if beta != 1.0:
        x = relay.multiply(x, relay.const(beta, "float32"))
    y = relay.nn.softmax(x, axis=-1) if op.name == "SOFTMAX" else relay.nn.log_softmax(x, -1)
    return quantize(conv, y, op.outputs[0]) if quantized else y


BINARY = {"ADD": relay.add, "SUB": relay.subtract, "MUL": relay.multiply, "DIV": relay.divide,
          "POW": relay.power, "MAXIMUM": relay.maximum, "MINIMUM": relay.minimum,
          "FLOOR_DIV": relay.floor_divide, "FLOOR_MOD": relay.floor_mod,
          "SQUARED_DIFFERENCE": lambda a, b: relay.multiply(relay.subtract(a, b),
                                                            relay.subtract(a, b))}
QNN_BINARY = {"ADD": "add", "SUB": "subtract", "MUL": "mul"}


@register(*BINARY)
def convert_binary(conv, op):
    """Broadcasting binary ops with an optional fused activation."""
    inputs_of(op, 2)
    (a_i, b_i), out_i = op.inputs, op.outputs[0]
    a, b = conv.get_expr(a_i), conv.get_expr(b_i)
    act = option(op, "FusedActivationFunction", 0)
    if not is_quantized(conv, op):
        return fused_activation(conv, BINARY[op.name](a, b), act, out_i)
    qa, qb = require_quant(conv, a_i, "lhs"), require_quant(conv, b_i, "rhs")
    qo = require_quant(conv, out_i, "output")
    if op.name in QNN_BINARY:
        fn = getattr(relay.qnn.op, QNN_BINARY[op.name])
        out = fn(a, b, qa.scale_expr(), qa.zero_point_expr(), qb.scale_expr(),
                 qb.zero_point_expr(), qo.scale_expr(), qo.zero_point_expr())
    elif op.name in ("MAXIMUM", "MINIMUM"):
        # order is preserved by a shared affine map, so compare in the output's domain
        out = BINARY[op.name](requantize_to(conv, a, a_i, out_i),
                              requantize_to(conv, b, b_i, out_i))
    else:
        out = quantize(conv, BINARY[op.name](dequantize(conv, a, a_i),
                                             dequantize(conv, b, b_i)), out_i)
    return fused_activation(conv, out, act, out_i)


@register("QUANTIZE")
def convert_quantize(conv, op):
    """QUANTIZE: float -> integer, or integer -> integer with new parameters (requantize)."""
    inputs_of(op, 1)
    in_i, out_i = op.inputs[0], op.outputs[0]
    x = conv.get_expr(in_i)
    if conv.tensor(in_i).dtype.startswith("float"):
        return quantize(conv, x, out_i)
    return requantize_to(conv, x, in_i, out_i)


@register("DEQUANTIZE")
def convert_dequantize(conv, op):
    """DEQUANTIZE: integer -> float32; float16 constants are just widened."""
    inputs_of(op, 1)
    in_i = op.inputs[0]
    x = conv.get_expr(in_i)
    if conv.tensor(in_i).dtype == "float16":
        return relay.cast(x, "float32")
    return dequantize(conv, x, in_i)


@register("CAST")
def convert_cast(conv, op):
    inputs_of(op, 1)
    if is_quantized(conv, op):
        raise OpNotImplemented("CAST of a quantized tensor")
    return relay.cast(conv.get_expr(op.inputs[0]), conv.tensor(op.outputs[0]).dtype)


@register("ARG_MAX", "ARG_MIN")
def convert_arg(conv, op):
    inputs_of(op, 2)
    axis = conv.const_value(op.inputs[1], "the axis").reshape(-1)
    if axis.size != 1:
        raise OpAttributeInvalid(f"expects one axis, got {axis.tolist()}")
    fn = relay.argmax if op.name == "ARG_MAX" else relay.argmin
    out = fn(conv.get_expr(op.inputs[0]), axis=[int(axis[0])])
    return relay.cast(out, conv.tensor(op.outputs[0]).dtype)
