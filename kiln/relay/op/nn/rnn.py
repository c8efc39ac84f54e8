"""Fused recurrent cells: ``nn.contrib_lstm_cell``, ``nn.contrib_gru_cell`` and
``nn.contrib_rnn_cell`` (kiln's own).

Entry points: :func:`contrib_lstm_cell`, :func:`contrib_gru_cell`, :func:`contrib_rnn_cell`,
:func:`pack_recurrent_weight` (the Relay expression packing ``R`` for them).

One call is one time step of an ONNX LSTM or GRU direction with the default activations (of
a simple RNN with tanh, relu or sigmoid): the
recurrent product of all gates and the gate arithmetic in one kernel (``OPAQUE``: nothing
fuses into it). The input projection of every step, ``xproj = X @ W.T + biases`` with shape
``[T, B, G * H]``, is computed once before the loop; the 0-d int32 input ``step`` plus the
attribute ``offset`` names the row a call reads (clamped into ``[0, T)``), so every step of a
layer is the same primitive function and compiles once (a loop unrolled ``U`` times over an
unknown length uses offsets ``0 .. U - 1``). The recurrent weight ``R [G * H, H]`` is packed
as ``[H / n, H, G, n]`` (:func:`pack_recurrent_weight`; FoldConstant folds it for a constant
``R``). The ONNX
converters use these ops when a layer has the default activations and no peepholes,
``input_forget`` or ``sequence_lens`` masking, and compose the cell from primitive ops
otherwise.

Example
-------
>>> from kiln import relay
>>> xproj = relay.var("xproj", shape=(8, 1, 64))
>>> state = relay.var("state", shape=(2, 1, 16))
>>> r = relay.var("r", shape=(64, 16))
>>> out = contrib_lstm_cell(xproj, state, pack_recurrent_weight(r, 4, 16, 8), step=3)
>>> out.attrs.clip is None
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import OPAQUE, call, define_op, register_op_attr, register_shape_func
from kiln.relay.op.type_relations import dims, fail, shape_str, tensor_arg, tensor_type
from kiln.runtime.error import TVMError

__all__ = ["contrib_lstm_cell", "contrib_gru_cell", "contrib_rnn_cell", "pack_recurrent_weight"]

LSTMCellAttrs = A.declare_attrs("LSTMCellAttrs", "nn.contrib_lstm_cell.", clip=None,
                                offset=0)
GRUCellAttrs = A.declare_attrs("GRUCellAttrs", "nn.contrib_gru_cell.",
                               linear_before_reset=False, clip=None, offset=0)
RNNCellAttrs = A.declare_attrs("RNNCellAttrs", "nn.contrib_rnn_cell.", activation="tanh",
                               clip=None, offset=0)
# the activations nn.contrib_rnn_cell applies (topi.nn.rnn.RNN_ACTIVATIONS computes them)
RNN_CELL_ACTIVATIONS = ("tanh", "relu", "sigmoid")


def _cell_dims(types, op_name: str, gates: int, state_rank: int) -> list[int]:
    """Check ``xproj``, the state and the packed weight; return the state's dims."""
    xproj, state, weight = (tensor_arg(types, i, op_name) for i in range(3))
    x, s, w = dims(xproj), dims(state), dims(weight)
    for name, shape, rank in (("xproj", x, 3), ("state", s, state_rank), ("weight", w, 4)):
        # the step count may be symbolic (a VM loop); the rest fixes the kernel's loops
        static = shape[1:] if name == "xproj" else shape
        if len(shape) != rank or not all(isinstance(d, int) for d in static):
            fail(f"{op_name}: {name} must be a static rank-{rank} tensor, got {shape_str(shape)}")
    batch, hidden = s[-2], s[-1]
    if w[0] * w[3] != hidden or w[1] != hidden or w[2] != gates:
        fail(f"{op_name}: weight {shape_str(w)} is not [H / n, H, {gates}, n] packed for "
             f"hidden size {hidden}")
    if x[1] != batch or x[2] != gates * hidden:
        fail(f"{op_name}: xproj {shape_str(x)} does not match batch {batch} and {gates} gates "
             f"of hidden size {hidden}")
    if state_rank == 3 and s[0] != 2:
        fail(f"{op_name}: state must stack (hidden, cell) as [2, B, H], got {shape_str(s)}")
    dtypes = {str(t.dtype) for t in (xproj, state, weight)}
    if len(dtypes) != 1:
        fail(f"{op_name}: operands must share one dtype, got {sorted(dtypes)}")
    return s


def _lstm_cell_rel(types, attrs, op_name):
    s = _cell_dims(types, op_name, 4, 3)
    _check_step(types[3] if len(types) > 3 else None, op_name)
    return tensor_type(s, types[1].dtype)


def _gru_cell_rel(types, attrs, op_name):
    s = _cell_dims(types, op_name, 3, 2)
    bias = dims(tensor_arg(types, 3, op_name))
    if bias != [s[1]]:
        fail(f"{op_name}: hbias must be [H] = [{s[1]}], got {shape_str(bias)}")
    _check_step(types[4] if len(types) > 4 else None, op_name)
    return tensor_type(s, types[1].dtype)


def _rnn_cell_rel(types, attrs, op_name):
    s = _cell_dims(types, op_name, 1, 2)
    if str(attrs.activation) not in RNN_CELL_ACTIVATIONS:
        fail(f"{op_name}: activation {attrs.activation!r} is not one of "
             f"{list(RNN_CELL_ACTIVATIONS)}")
    _check_step(types[3] if len(types) > 3 else None, op_name)
    return tensor_type(s, types[1].dtype)


def _check_step(step, op_name):
    if step is None or dims(step) or str(step.dtype) != "int32":
        fail(f"{op_name}: step must be a 0-d int32 tensor, got {step}")


define_op("nn.contrib_lstm_cell", _lstm_cell_rel, OPAQUE, 4, LSTMCellAttrs,
          "one fused LSTM step", 10)
define_op("nn.contrib_gru_cell", _gru_cell_rel, OPAQUE, 5, GRUCellAttrs,
          "one fused GRU step", 10)
define_op("nn.contrib_rnn_cell", _rnn_cell_rel, OPAQUE, 4, RNNCellAttrs,
          "one fused simple-RNN step", 10)


def _step(step: Any) -> Any:
    """A Python int becomes a 0-d int32 constant; an expression stays as it is."""
    if isinstance(step, int | np.integer):
        from kiln.relay.expr import const

        return const(np.int32(step))
    return step


def contrib_lstm_cell(xproj: Any, state: Any, weight: Any, step: Any,
                      clip: float | None = None, offset: int = 0) -> Any:
    """Next ``[2, B, H]`` (hidden, cell) state of an ONNX LSTM (gates i, o, f, c).

    ``xproj [T, B, 4H]``: the input projections with both biases; ``weight``: ``R`` packed by
    :func:`pack_recurrent_weight`; ``step + offset``: the row of ``xproj`` (``step`` an int
    or a 0-d int32 expression); ``clip``: ONNX's cell clip of the gate pre-activations.
    """
    return call("nn.contrib_lstm_cell", [xproj, state, weight, _step(step)],
                LSTMCellAttrs(clip=None if clip is None else float(clip), offset=int(offset)))


def contrib_gru_cell(xproj: Any, hidden: Any, weight: Any, hbias: Any, step: Any,
                     linear_before_reset: bool = False, clip: float | None = None,
                     offset: int = 0) -> Any:
    """Next ``[B, H]`` hidden state of an ONNX GRU (gates z, r, h).

    ``xproj [T, B, 3H]`` holds the input biases and the z and r gates' recurrent biases;
    ``hbias [H]`` is the h gate's recurrent bias, applied per ``linear_before_reset``.
    """
    return call("nn.contrib_gru_cell", [xproj, hidden, weight, hbias, _step(step)],
                GRUCellAttrs(linear_before_reset=bool(linear_before_reset),
                             clip=None if clip is None else float(clip), offset=int(offset)))


def contrib_rnn_cell(xproj: Any, hidden: Any, weight: Any, step: Any, activation: str = "tanh",
                     clip: float | None = None, offset: int = 0) -> Any:
    """Next ``[B, H]`` hidden state of an ONNX RNN: ``f(xproj[step + offset] + h @ R.T)``,
    ``f`` one of ``tanh``, ``relu``, ``sigmoid``; ``xproj [T, B, H]`` holds both biases."""
    return call("nn.contrib_rnn_cell", [xproj, hidden, weight, _step(step)],
                RNNCellAttrs(activation=str(activation),
                             clip=None if clip is None else float(clip), offset=int(offset)))


def pack_recurrent_weight(weight: Any, gates: int, hidden: int, lanes: int) -> Any:
    """``R [G * H, H]`` → ``[H / n, H, G, n]`` with ``packed[jb, k, q, ji] = R[q*H + jb*n + ji,
    k]``, as Relay reshape + transpose (folded at compile time for a constant ``R``)."""
    from kiln.relay.op.transform import reshape, transpose

    if hidden % lanes:
        raise TVMError(f"pack_recurrent_weight: hidden size {hidden} is not a multiple of "
                       f"{lanes} lanes")
    split = reshape(weight, [gates, hidden // lanes, lanes, hidden])
    return transpose(split, [1, 3, 0, 2])


# -- NumPy reference semantics (the interpreter and FoldConstant) --------------------------


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _unpack(weight: np.ndarray) -> np.ndarray:
    """``[H / n, H, G, n]`` → ``[G, H, H]``: gate ``q``'s ``R_q`` (rows are hidden units)."""
    blocks, k, gates, lanes = weight.shape
    return weight.transpose(2, 0, 3, 1).reshape(gates, blocks * lanes, k)


def _clip(x, clip):
    return x if clip is None else np.clip(x, -clip, clip)


def _row(xproj, step, offset):
    return xproj[min(max(int(step) + int(offset), 0), xproj.shape[0] - 1)]


def _lstm_cell_numpy(attrs, args, out_type):
    xproj, state, weight, step = args
    r = _unpack(weight)
    h, c = state[0], state[1]
    x = np.split(_row(xproj, step, attrs.offset), 4, axis=-1)
    i, o, f, g = (_clip(x[q] + h @ r[q].T, attrs.clip) for q in range(4))
    c_next = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return np.stack([_sigmoid(o) * np.tanh(c_next), c_next]).astype(state.dtype)


def _gru_cell_numpy(attrs, args, out_type):
    xproj, h, weight, hbias, step = args
    r_w = _unpack(weight)
    xz, xr, xh = np.split(_row(xproj, step, attrs.offset), 3, axis=-1)
    z = _sigmoid(_clip(xz + h @ r_w[0].T, attrs.clip))
    r = _sigmoid(_clip(xr + h @ r_w[1].T, attrs.clip))
    if attrs.linear_before_reset:
        n = np.tanh(_clip(xh + r * (h @ r_w[2].T + hbias), attrs.clip))
    else:
        n = np.tanh(_clip(xh + (r * h) @ r_w[2].T + hbias, attrs.clip))
    return ((1 - z) * n + z * h).astype(h.dtype)


def _rnn_cell_numpy(attrs, args, out_type):
    xproj, h, weight, step = args
    pre = _clip(_row(xproj, step, attrs.offset) + h @ _unpack(weight)[0].T, attrs.clip)
    act = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0), "sigmoid": _sigmoid}
    return act[str(attrs.activation)](pre).astype(h.dtype)


register_op_attr("nn.contrib_lstm_cell", "FNumpyEval", _lstm_cell_numpy)
register_op_attr("nn.contrib_rnn_cell", "FNumpyEval", _rnn_cell_numpy)
register_op_attr("nn.contrib_gru_cell", "FNumpyEval", _gru_cell_numpy)


def _cell_shape_func(attrs, in_dims, out_types):
    """The new state has the old state's shape (static, the type relation checks it); the
    step count of ``xproj`` may be symbolic (a VM loop)."""
    return [list(in_dims[1])]


register_shape_func("nn.contrib_lstm_cell", False, _cell_shape_func)
register_shape_func("nn.contrib_gru_cell", False, _cell_shape_func)
register_shape_func("nn.contrib_rnn_cell", False, _cell_shape_func)
