"""from_tflite: float32 UNIDIRECTIONAL_SEQUENCE_LSTM (plain, CIFG, peepholes, projection,
clipping, time-major) against LiteRT on the same bytes, on the graph executor and the VM."""

from __future__ import annotations

import numpy as np
import pytest
from tflite_helpers import check_float

from kiln import relay
from kiln.relay.testing.tflite import TFLiteModelBuilder
from kiln.runtime.error import TVMError

RNG = np.random.default_rng(11)


def rand(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def lstm_model(batch=2, steps=5, features=3, units=4, cifg=False, peephole=False,
               projection=0, time_major=False, cell_clip=0.0, proj_clip=0.0, act=4,
               layer_norm=False):
    """A one-operator LSTM model; ``projection`` > 0 adds a projection to that width."""
    b = TFLiteModelBuilder()
    in_shape = (steps, batch, features) if time_major else (batch, steps, features)
    width = projection or units
    inputs = [b.add_input("x", in_shape)] + [-1] * 23
    for k in range(4):   # gates: input, forget, cell, output
        if cifg and k == 0:
            continue
        inputs[1 + k] = b.add_const(f"w_in{k}", rand(units, features))
        inputs[5 + k] = b.add_const(f"w_rec{k}", rand(units, width))
        inputs[12 + k] = b.add_const(f"bias{k}", rand(units))
    if peephole:
        for k in range(3):
            if not (cifg and k == 0):
                inputs[9 + k] = b.add_const(f"peep{k}", rand(units))
    if projection:
        inputs[16] = b.add_const("proj", rand(projection, units))
        inputs[17] = b.add_const("proj_bias", rand(projection))
    inputs[18] = b.add_tensor("h0", (batch, width), is_variable=True)
    inputs[19] = b.add_tensor("c0", (batch, units), is_variable=True)
    if layer_norm:
        for k in range(4):
            inputs[20 + k] = b.add_const(f"ln{k}", rand(units))
    out_shape = (steps, batch, width) if time_major else (batch, steps, width)
    out = b.add_tensor("out", out_shape)
    b.add_operator("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [out],
                   "UnidirectionalSequenceLSTMOptions", FusedActivationFunction=act,
                   CellClip=cell_clip, ProjClip=proj_clip, TimeMajor=time_major)
    b.add_output(out)
    return b.finish(), in_shape


@pytest.mark.parametrize("kwargs", [
    {},
    {"cifg": True},
    {"peephole": True, "cell_clip": 0.8},
    {"cifg": True, "peephole": True},
    {"projection": 3, "proj_clip": 0.3},
    {"time_major": True, "steps": 3, "batch": 1},
    {"act": 1}])
def test_lstm_matches_litert(kwargs):
    model, in_shape = lstm_model(**kwargs)
    check_float(model, [rand(*in_shape, scale=1.0)], atol=1e-5, rtol=1e-4)


def test_lstm_on_the_vm():
    model, in_shape = lstm_model(peephole=True, projection=2)
    check_float(model, [rand(*in_shape, scale=1.0)], atol=1e-5, rtol=1e-4, executor="vm")


def test_layer_normalized_lstm_is_refused():
    model, _ = lstm_model(layer_norm=True)
    with pytest.raises(TVMError, match="layer-normalized"):
        relay.frontend.from_tflite(model)
