"""TFLite recurrent operators: UNIDIRECTIONAL_SEQUENCE_LSTM (float32).

Entry points: the converters registered into :data:`.tflite_ops.CONVERTERS`.

The LSTM is unrolled over the (static) time axis as TVM v0.16's frontend does, with the cell of
TFLite's reference kernel (``lstm_eval.cc``): gates in TFLite's order input, forget, cell,
output; CIFG (no input gate: ``i = 1 - f``), peephole connections, ``cell_clip``, a projection
layer with ``proj_clip``, batch- or time-major sequences, and the fused activation applied to
the cell gate and the cell output. The input projections of all steps are one ``nn.dense``.
State tensors with no producer (TFLite's variable tensors, zero when the interpreter starts)
start at zero. Quantized and hybrid (int8 weights on float data) LSTMs and layer-normalized
ones raise ``OpNotImplemented`` / ``OpAttributeUnImplemented``, as in TVM.
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.common import infer_shape
from kiln.relay.frontend.tflite_ops import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    ACT_TANH,
    inputs_of,
    is_quantized,
    option,
    register,
)
from kiln.runtime.error import OpAttributeInvalid, OpAttributeUnImplemented, OpNotImplemented

__all__: list[str] = []

# input indices of UNIDIRECTIONAL_SEQUENCE_LSTM (TFLite's lstm_shared.h)
INPUT_WEIGHTS = (1, 2, 3, 4)        # input-to-{input, forget, cell, output} gate
RECURRENT_WEIGHTS = (5, 6, 7, 8)
PEEPHOLES = (9, 10, 11)             # cell-to-{input, forget, output}
BIASES = (12, 13, 14, 15)
PROJECTION_WEIGHTS, PROJECTION_BIAS = 16, 17
OUTPUT_STATE, CELL_STATE = 18, 19
LAYER_NORMS = (20, 21, 22, 23)

ACTIVATIONS = {ACT_NONE: lambda e: e, ACT_RELU: relay.nn.relu,
               ACT_RELU6: lambda e: relay.clip(e, 0.0, 6.0), ACT_TANH: relay.tanh}


def _optional(op, index: int) -> int:
    return op.inputs[index] if index < len(op.inputs) else -1


def _state(conv, index: int, shape: tuple):
    """A state input: its value when something provides it, else TFLite's initial zeros."""
    t = conv.tensor(index)
    if index in conv.exprs or t.data is not None:
        return relay.reshape(conv.get_expr(index), shape)
    return relay.zeros(shape, "float32")


def _clip(expr, bound: float):
    return relay.clip(expr, -bound, bound) if bound > 0 else expr


@register("UNIDIRECTIONAL_SEQUENCE_LSTM")
def convert_unidirectional_sequence_lstm(conv, op):
    """UNIDIRECTIONAL_SEQUENCE_LSTM: the sequence of hidden states (projected when the model
    has a projection layer)."""
    inputs_of(op, 20, 24)
    if is_quantized(conv, op):
        raise OpNotImplemented("quantized UNIDIRECTIONAL_SEQUENCE_LSTM")
    if any(_optional(op, i) >= 0 for i in LAYER_NORMS):
        raise OpAttributeUnImplemented("layer-normalized UNIDIRECTIONAL_SEQUENCE_LSTM")
    for i in INPUT_WEIGHTS + RECURRENT_WEIGHTS + PEEPHOLES + (PROJECTION_WEIGHTS,):
        if op.inputs[i] >= 0 and conv.tensor(op.inputs[i]).dtype != "float32":
            raise OpNotImplemented(f"UNIDIRECTIONAL_SEQUENCE_LSTM with "
                                   f"{conv.tensor(op.inputs[i]).dtype} weights (hybrid)")
    act = int(option(op, "FusedActivationFunction", ACT_TANH))
    if act not in ACTIVATIONS:
        raise OpAttributeUnImplemented(f"LSTM activation {act} (kiln converts NONE, RELU, "
                                       "RELU6 and TANH)")
    activation = ACTIVATIONS[act]
    time_major = bool(option(op, "TimeMajor", False))
    cell_clip = float(option(op, "CellClip", 0.0))
    proj_clip = float(option(op, "ProjClip", 0.0))

    x = conv.get_expr(op.inputs[0])
    shape = infer_shape(x)
    if len(shape) != 3:
        raise OpAttributeInvalid(f"expects a 3-D input sequence, got shape {shape}")
    steps, batch = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    forget_w = conv.const_value(op.inputs[2], "the input-to-forget weights")
    units, features = forget_w.shape
    if features != shape[2]:
        raise OpAttributeInvalid(f"input-to-forget weights {forget_w.shape} do not fit "
                                 f"{shape[2]} input features")
    cifg = op.inputs[1] < 0
    gates = INPUT_WEIGHTS[1:] if cifg else INPUT_WEIGHTS
    w_in = np.concatenate([conv.const_value(op.inputs[i], "the input weights") for i in gates])
    w_rec = np.concatenate([conv.const_value(op.inputs[i + 4], "the recurrent weights")
                            for i in gates])
    bias = np.concatenate([conv.const_value(op.inputs[i + 11], "the gate biases")
                           for i in gates])
    width = w_rec.shape[1]   # the output (projected) size: the recurrent input
    proj_i = _optional(op, PROJECTION_WEIGHTS)
    if proj_i < 0 and width != units:
        raise OpAttributeInvalid(f"recurrent weights {w_rec.shape} need {units} inputs per "
                                 "gate without a projection layer")
    if w_in.shape != (len(gates) * units, features) or \
            w_rec.shape != (len(gates) * units, width) or bias.shape != (len(gates) * units,):
        raise OpAttributeInvalid(f"gate weights {w_in.shape}, recurrent weights {w_rec.shape} "
                                 f"and biases {bias.shape} do not fit {units} units")

    # every step's input projection in one dense: (steps * batch, gates * units)
    projected = relay.nn.bias_add(
        relay.nn.dense(relay.reshape(x, (-1, features)), relay.const(w_in)),
        relay.const(bias))
    projected = relay.reshape(projected, (shape[0], shape[1], len(gates) * units))
    per_step = relay.split(projected, steps, axis=0 if time_major else 1)
    peep = {name: relay.const(conv.const_value(op.inputs[i], "a peephole weight"))
            for name, i in zip(("i", "f", "o"), PEEPHOLES) if op.inputs[i] >= 0}
    h = _state(conv, op.inputs[OUTPUT_STATE], (batch, width))
    c = _state(conv, op.inputs[CELL_STATE], (batch, units))
    recurrent = relay.const(w_rec)
    outputs = []
    for t in range(steps):
        z = relay.add(relay.reshape(per_step[t], (batch, len(gates) * units)),
                      relay.nn.dense(h, recurrent))
        parts = relay.split(z, len(gates), axis=1)
        if cifg:
            f_pre, g_pre, o_pre = (parts[k] for k in range(3))
        else:
            i_pre, f_pre, g_pre, o_pre = (parts[k] for k in range(4))
        if "f" in peep:
            f_pre = relay.add(f_pre, relay.multiply(peep["f"], c))
        f = relay.sigmoid(f_pre)
        if cifg:
            i = relay.subtract(relay.const(1.0), f)
        else:
            i = relay.sigmoid(relay.add(i_pre, relay.multiply(peep["i"], c))
                              if "i" in peep else i_pre)
        c = _clip(relay.add(relay.multiply(f, c), relay.multiply(i, activation(g_pre))),
                  cell_clip)
        if "o" in peep:
            o_pre = relay.add(o_pre, relay.multiply(peep["o"], c))
        h = relay.multiply(relay.sigmoid(o_pre), activation(c))
        if proj_i >= 0:
            h = relay.nn.dense(h, relay.const(conv.const_value(proj_i, "the projection")))
            if _optional(op, PROJECTION_BIAS) >= 0:
                h = relay.nn.bias_add(h, relay.const(conv.const_value(
                    op.inputs[PROJECTION_BIAS], "the projection bias")))
            h = _clip(h, proj_clip)
        outputs.append(h)
    return relay.stack(outputs, axis=0 if time_major else 1)
