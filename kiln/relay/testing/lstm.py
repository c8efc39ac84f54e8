"""An unrolled LSTM workload (TVM's ``relay.testing.lstm``).

Each step calls an LSTM cell *function* (a let-bound closure call, not inlined), so the
workload exercises calls, tuples of states and let chains as TVM's does. Unlike TVM, whose
steps each take a separate parameter named ``data``, every step reads the one ``data`` input:
names stay unique, so ``params`` and ``set_input("data", ...)`` mean one thing.
"""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers


def lstm_cell(num_hidden: int, batch_size: int = 1, dtype: str = "float32",
              name: str = "") -> Any:
    """A cell ``(inputs, (h, c), i2h_w, i2h_b, h2h_w, h2h_b) -> (h', (h', c'))``."""
    hidden = relay.TensorType((batch_size, num_hidden), dtype)
    weight = relay.TensorType((4 * num_hidden, num_hidden), dtype)
    bias = relay.TensorType((4 * num_hidden,), dtype)
    state_type = relay.TupleType([hidden, hidden])
    inputs, states = relay.var("inputs", hidden), relay.var("states", state_type)
    params = [relay.var(f"{k}_{p}", weight if p == "weight" else bias)
              for k in ("i2h", "h2h") for p in ("weight", "bias")]
    sb = relay.ScopeBuilder()
    i2h = sb.let("i2h", layers.dense_add_bias(inputs, params[0], params[1], 4 * num_hidden,
                                              name=f"{name}i2h"))
    h2h = sb.let("h2h", layers.dense_add_bias(relay.TupleGetItem(states, 0), params[2],
                                              params[3], 4 * num_hidden, name=f"{name}h2h"))
    gates = sb.let("slice_gates", relay.split(relay.add(i2h, h2h), 4, axis=1).astuple())
    in_gate, forget_gate, out_gate = (
        sb.let(n, relay.sigmoid(relay.TupleGetItem(gates, i)))
        for n, i in (("in_gate", 0), ("forget_gate", 1), ("out_gate", 3)))
    in_transform = sb.let("in_transform", relay.tanh(relay.TupleGetItem(gates, 2)))
    next_c = sb.let("next_c", relay.add(relay.multiply(forget_gate,
                                                       relay.TupleGetItem(states, 1)),
                                        relay.multiply(in_gate, in_transform)))
    next_h = sb.let("next_h", relay.multiply(out_gate, relay.tanh(next_c)))
    sb.ret(relay.Tuple([next_h, relay.Tuple([next_h, next_c])]))
    return relay.Function([inputs, states, *params], sb.get(),
                          relay.TupleType([hidden, state_type]))


def get_net(iterations: int, num_hidden: int, batch_size: int = 1,
            dtype: str = "float32") -> Any:
    """``iterations`` LSTM steps from zero states; returns the last hidden state."""
    if iterations < 1:
        raise ValueError(f"an LSTM needs at least one iteration, got {iterations}")
    hidden = relay.TensorType((batch_size, num_hidden), dtype)
    data = relay.var("data", hidden)
    sb = relay.ScopeBuilder()
    zeros = sb.let("zeros", relay.zeros((batch_size, num_hidden), dtype))
    states: Any = sb.let("init_states", relay.Tuple([zeros, zeros]))
    out = None
    for i in range(iterations):
        weights = [relay.var(f"{k}_{i}_{p}") for k in ("i2h", "h2h") for p in ("weight", "bias")]
        cell = lstm_cell(num_hidden, batch_size, dtype, f"lstm_{i}")
        call = sb.let(f"call_{i}", relay.Call(cell, [data, states, *weights]))
        out = sb.let(f"out_{i}", relay.TupleGetItem(call, 0))
        states = sb.let(f"states_{i}", relay.TupleGetItem(call, 1))
    sb.ret(out)
    body = sb.get()
    return relay.Function(relay.analysis.free_vars(body), body, hidden)


def get_workload(iterations: int, num_hidden: int, batch_size: int = 1,
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of the unrolled LSTM."""
    return create_workload(get_net(iterations, num_hidden, batch_size, dtype))
