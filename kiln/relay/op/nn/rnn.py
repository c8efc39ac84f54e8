"""Recurrent layers over a whole sequence: ``nn.contrib_lstm_sequence``,
``nn.contrib_gru_sequence`` and ``nn.contrib_rnn_sequence`` (kiln's own).

Entry points: :func:`contrib_lstm_sequence`, :func:`contrib_gru_sequence`,
:func:`contrib_rnn_sequence`, :func:`pack_recurrent_weight` (the Relay expression packing
``R`` for them).

One call is one direction of an ONNX LSTM or GRU with the default activations (of a simple
RNN with tanh, relu or sigmoid) over all its steps: the recurrent product of all gates and the
gate arithmetic of every step in one kernel (``OPAQUE``: nothing fuses into it; see
:mod:`kiln.topi.nn.rnn`). The input projection of every step, ``xproj = X @ W.T + biases`` with
shape ``[T, B, G * H]``, is computed before it; ``T`` may be ``Any`` (a VM model with a
symbolic sequence length runs the same one call). The result is a tuple ``(Y [T, B, H], final
state)``, ``Y`` in time order for either direction. The recurrent weight ``R [G * H, H]`` is
packed as ``[H / n, H, G, n]`` (:func:`pack_recurrent_weight`; FoldConstant folds it for a
constant ``R``). The ONNX converters use these ops for float32 layers with the default
activations and no peepholes, ``input_forget`` or ``sequence_lens`` masking, and compose the
cell from primitive ops otherwise.

Example
-------
>>> from kiln import relay
>>> xproj = relay.var("xproj", shape=(8, 1, 64))
>>> state = relay.var("state", shape=(2, 1, 16))
>>> r = relay.var("r", shape=(64, 16))
>>> layer = contrib_lstm_sequence(xproj, state, pack_recurrent_weight(r, 4, 16, 8))
>>> y, final = layer
>>> layer.astuple().op.name, bool(layer.astuple().attrs.reverse)
('nn.contrib_lstm_sequence', False)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    OPAQUE,
    call,
    define_op,
    register_compute,
    register_op_attr,
    register_opaque_schedule,
    register_reference,
    register_shape_func,
)
from kiln.relay.op.type_relations import (
    TupleType,
    dims,
    fail,
    shape_str,
    tensor_arg,
    tensor_type,
)
from kiln.runtime.error import TVMError

__all__ = ["contrib_lstm_sequence", "contrib_gru_sequence", "contrib_rnn_sequence",
           "contrib_check_sequence_lens", "pack_recurrent_weight"]

LSTMSequenceAttrs = A.declare_attrs("LSTMSequenceAttrs", "nn.contrib_lstm_sequence.",
                                    clip=None, reverse=False)
GRUSequenceAttrs = A.declare_attrs("GRUSequenceAttrs", "nn.contrib_gru_sequence.",
                                   linear_before_reset=False, clip=None, reverse=False)
RNNSequenceAttrs = A.declare_attrs("RNNSequenceAttrs", "nn.contrib_rnn_sequence.",
                                   activation="tanh", clip=None, reverse=False)
CheckSequenceLensAttrs = A.declare_attrs("CheckSequenceLensAttrs",
                                         "nn.contrib_check_sequence_lens.", layer="lstm")
# the activations nn.contrib_rnn_sequence applies (topi.nn.rnn.RNN_ACTIVATIONS computes them)
RNN_CELL_ACTIVATIONS = ("tanh", "relu", "sigmoid")
# lanes of the packed weight the kernel takes (kiln.topi.nn.rnn)
PACKED_LANES = (1, 2, 4, 8, 16)


def _sequence_dims(types, op_name: str, gates: int, state_rank: int) -> list[int]:
    """Check ``xproj``, the state and the packed weight; return the state's dims."""
    xproj, state, weight = (tensor_arg(types, i, op_name) for i in range(3))
    x, s, w = dims(xproj), dims(state), dims(weight)
    for name, shape, rank in (("xproj", x, 3), ("state", s, state_rank), ("weight", w, 4)):
        # the step count may be symbolic (a VM model); the rest fixes the kernel's loops
        static = shape[1:] if name == "xproj" else shape
        if len(shape) != rank or not all(isinstance(d, int) for d in static):
            fail(f"{op_name}: {name} must be a static rank-{rank} tensor, got {shape_str(shape)}")
    batch, hidden = s[-2], s[-1]
    if w[0] * w[3] != hidden or w[1] != hidden or w[2] != gates or w[3] not in PACKED_LANES:
        fail(f"{op_name}: weight {shape_str(w)} is not [H / n, H, {gates}, n] packed for "
             f"hidden size {hidden} with n one of {list(PACKED_LANES)}")
    if x[1] != batch or x[2] != gates * hidden:
        fail(f"{op_name}: xproj {shape_str(x)} does not match batch {batch} and {gates} gates "
             f"of hidden size {hidden}")
    if state_rank == 3 and s[0] != 2:
        fail(f"{op_name}: state must stack (hidden, cell) as [2, B, H], got {shape_str(s)}")
    found = [str(t.dtype) for t in (xproj, state, weight)]
    if set(found) != {"float32"}:
        fail(f"{op_name}: operands must be float32 (the kernel's dtype), got {found}")
    return s


def _check_lens(types, index, batch, op_name):
    lens = tensor_arg(types, index, op_name)
    if str(lens.dtype) != "int32" or dims(lens) not in ([batch], [1]):
        fail(f"{op_name}: sequence_lens must be int32 [{batch}] or [1], got "
             f"{shape_str(dims(lens))} {lens.dtype}")


def _result(types, s, op_name):
    """``(Y [T, B, H], final state)``."""
    steps = dims(tensor_arg(types, 0, op_name))[0]
    return TupleType([tensor_type([steps, s[-2], s[-1]], "float32"),
                      tensor_type(s, "float32")])


def _lstm_rel(types, attrs, op_name):
    s = _sequence_dims(types, op_name, 4, 3)
    _check_lens(types, 3, s[1], op_name)
    return _result(types, s, op_name)


def _gru_rel(types, attrs, op_name):
    s = _sequence_dims(types, op_name, 3, 2)
    hbias = tensor_arg(types, 3, op_name)
    if dims(hbias) != [s[1]] or str(hbias.dtype) != "float32":
        fail(f"{op_name}: hbias must be float32 [H] = [{s[1]}], got {shape_str(dims(hbias))} "
             f"{hbias.dtype}")
    _check_lens(types, 4, s[0], op_name)
    return _result(types, s, op_name)


def _rnn_rel(types, attrs, op_name):
    s = _sequence_dims(types, op_name, 1, 2)
    if str(attrs.activation) not in RNN_CELL_ACTIVATIONS:
        fail(f"{op_name}: activation {attrs.activation!r} is not one of "
             f"{list(RNN_CELL_ACTIVATIONS)}")
    _check_lens(types, 3, s[0], op_name)
    return _result(types, s, op_name)


define_op("nn.contrib_lstm_sequence", _lstm_rel, OPAQUE, 4, LSTMSequenceAttrs,
          "an LSTM direction over a whole sequence", 10)
define_op("nn.contrib_gru_sequence", _gru_rel, OPAQUE, 5, GRUSequenceAttrs,
          "a GRU direction over a whole sequence", 10)
define_op("nn.contrib_rnn_sequence", _rnn_rel, OPAQUE, 4, RNNSequenceAttrs,
          "a simple-RNN direction over a whole sequence", 10)


def _clip_attr(clip: float | None) -> float | None:
    return None if clip is None else float(clip)


def _lens(sequence_lens: Any) -> Any:
    """The lengths operand: ``sequence_lens``, or one length no sequence reaches."""
    if sequence_lens is not None:
        return sequence_lens
    from kiln.relay.expr import const

    return const(np.array([np.iinfo(np.int32).max], "int32"))


def _wrap(out: Any) -> Any:
    from kiln.relay.expr import TupleWrapper

    return TupleWrapper(out, 2)


def contrib_lstm_sequence(xproj: Any, state: Any, weight: Any, clip: float | None = None,
                          reverse: bool = False, sequence_lens: Any = None) -> Any:
    """``(Y [T, B, H], final [2, B, H])`` of an ONNX LSTM direction (gates i, o, f, c).

    ``xproj [T, B, 4H]``: the input projections with both biases; ``state``: the initial
    ``[2, B, H]`` (hidden, cell); ``weight``: ``R`` packed by :func:`pack_recurrent_weight`;
    ``clip``: ONNX's cell clip of the gate pre-activations; ``reverse``: run the steps from
    the last to the first; ``sequence_lens``: int32 ``[B]`` (or ``[1]``) lengths, clamped
    into ``[0, T]``: a row's steps at and past its length output zeros and keep the state
    (ONNX's ``sequence_lens``; a reverse row starts at its last step; a row of length 0
    ends with a zero state, as in onnxruntime); default: all ``T``.
    """
    return _wrap(call("nn.contrib_lstm_sequence", [xproj, state, weight, _lens(sequence_lens)],
                      LSTMSequenceAttrs(clip=_clip_attr(clip), reverse=bool(reverse))))


def contrib_gru_sequence(xproj: Any, hidden: Any, weight: Any, hbias: Any,
                         linear_before_reset: bool = False, clip: float | None = None,
                         reverse: bool = False, sequence_lens: Any = None) -> Any:
    """``(Y [T, B, H], final [B, H])`` of an ONNX GRU direction (gates z, r, h).

    ``xproj [T, B, 3H]`` holds the input biases and the z and r gates' recurrent biases;
    ``hbias [H]`` is the h gate's recurrent bias, applied per ``linear_before_reset``;
    ``sequence_lens`` as in :func:`contrib_lstm_sequence`.
    """
    return _wrap(call("nn.contrib_gru_sequence",
                      [xproj, hidden, weight, hbias, _lens(sequence_lens)],
                      GRUSequenceAttrs(linear_before_reset=bool(linear_before_reset),
                                       clip=_clip_attr(clip), reverse=bool(reverse))))


def contrib_rnn_sequence(xproj: Any, hidden: Any, weight: Any, activation: str = "tanh",
                         clip: float | None = None, reverse: bool = False,
                         sequence_lens: Any = None) -> Any:
    """``(Y [T, B, H], final [B, H])`` of an ONNX RNN direction: ``h' = f(xproj[t] + h @
    R.T)``, ``f`` one of ``tanh``, ``relu``, ``sigmoid``; ``xproj [T, B, H]`` holds both
    biases; ``sequence_lens`` as in :func:`contrib_lstm_sequence`."""
    return _wrap(call("nn.contrib_rnn_sequence", [xproj, hidden, weight, _lens(sequence_lens)],
                      RNNSequenceAttrs(activation=str(activation), clip=_clip_attr(clip),
                                       reverse=bool(reverse))))


def contrib_check_sequence_lens(sequence_lens: Any, data: Any, layer: str) -> Any:
    """``sequence_lens`` (int32 ``[B]``), after a run-time check that each length lies in
    ``[0, T]``, ``T`` the first dim of ``data`` (the ``[T, B, ...]`` sequence): a length
    outside raises a TVMError naming ``layer`` (``"lstm"``, ``"gru"``, ``"rnn"``), the row
    and the value, as onnxruntime refuses it (the layer ops would clamp it)."""
    return call("nn.contrib_check_sequence_lens", [sequence_lens, data],
                CheckSequenceLensAttrs(layer=str(layer)))


def sequence_lens_error(layer: str, lens: np.ndarray, steps: int) -> str | None:
    """The message for the first length of ``lens`` outside ``[0, steps]`` (None: all
    inside); the kernel's text (kiln.topi.nn.rnn.LENS_CHECK_SOURCE)."""
    bad = np.flatnonzero((lens < 0) | (lens > steps))
    if not bad.size:
        return None
    row = int(bad[0])
    return (f"{layer.upper()}: sequence_lens[{row}] = {int(lens[row])} is outside [0, {steps}]: "
            "each row's length must be >= 0 and <= the sequence length")


def _check_sequence_lens_rel(types, attrs, op_name):
    lens, data = tensor_arg(types, 0, op_name), tensor_arg(types, 1, op_name)
    if str(lens.dtype) != "int32" or len(dims(lens)) != 1:
        fail(f"{op_name}: sequence_lens must be an int32 vector, got "
             f"{shape_str(dims(lens))} {lens.dtype}")
    if not dims(data):
        fail(f"{op_name}: the sequence must have a leading step dim, got a scalar")
    if str(attrs.layer) not in ("lstm", "gru", "rnn"):
        fail(f"{op_name}: layer {attrs.layer!r} is not one of ['lstm', 'gru', 'rnn']")
    return tensor_type(dims(lens), "int32")


define_op("nn.contrib_check_sequence_lens", _check_sequence_lens_rel, OPAQUE, 2,
          CheckSequenceLensAttrs, "sequence_lens checked to lie in [0, T] at run time", 10)


@register_compute("nn.contrib_check_sequence_lens")
def _check_sequence_lens_compute(attrs, inputs, out_type):
    from kiln.topi.nn.rnn import check_sequence_lens

    return [check_sequence_lens(inputs[0], inputs[1].shape[0], str(attrs.layer))]


register_opaque_schedule("nn.contrib_check_sequence_lens")


@register_reference("nn.contrib_check_sequence_lens")
def _check_sequence_lens_numpy(attrs, args, out_type):
    lens, data = args
    message = sequence_lens_error(str(attrs.layer), lens, data.shape[0])
    if message is not None:
        raise TVMError(message)
    return lens.copy()


def _check_sequence_lens_shape_func(attrs, in_dims, out_types):
    """The lengths' own shape."""
    return [list(in_dims[0])]


register_shape_func("nn.contrib_check_sequence_lens", False, _check_sequence_lens_shape_func)


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


def _run_steps(xproj, state, lens, attrs, step):
    """``(Y, final)``: ``state = step(xproj[t], state)`` over the steps in the attrs' order,
    for the batch rows whose length ``t`` is within (the others keep their state and output
    zeros); ``step`` returns ``(hidden row, next state)``."""
    steps = xproj.shape[0]
    lens = np.broadcast_to(np.clip(lens, 0, steps), (xproj.shape[1],))
    ys = np.zeros((steps, *state.shape[-2:]), state.dtype)
    for t in (range(steps - 1, -1, -1) if attrs.reverse else range(steps)):
        active = (t < lens)[:, None]
        row, new = step(xproj[t], state)
        ys[t] = np.where(active, row, 0)
        state = np.where(active, new, state)
    # a row that ran no step ends with a zero state (onnxruntime's result)
    return ys, np.where((lens > 0)[:, None], state, 0).astype(xproj.dtype)


def _lstm_numpy(attrs, args, out_type):
    xproj, state, weight, lens = args
    r = _unpack(weight)

    def step(x_row, st):
        h, c = st[0], st[1]
        x = np.split(x_row, 4, axis=-1)
        i, o, f, g = (_clip(x[q] + h @ r[q].T, attrs.clip) for q in range(4))
        c_next = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_next = _sigmoid(o) * np.tanh(c_next)
        return h_next, np.stack([h_next, c_next])

    return _run_steps(xproj, state, lens, attrs, step)


def _gru_numpy(attrs, args, out_type):
    xproj, h0, weight, hbias, lens = args
    r_w = _unpack(weight)

    def step(x_row, h):
        xz, xr, xh = np.split(x_row, 3, axis=-1)
        z = _sigmoid(_clip(xz + h @ r_w[0].T, attrs.clip))
        r = _sigmoid(_clip(xr + h @ r_w[1].T, attrs.clip))
        if attrs.linear_before_reset:
            n = np.tanh(_clip(xh + r * (h @ r_w[2].T + hbias), attrs.clip))
        else:
            n = np.tanh(_clip(xh + (r * h) @ r_w[2].T + hbias, attrs.clip))
        h_next = (1 - z) * n + z * h
        return h_next, h_next

    return _run_steps(xproj, h0, lens, attrs, step)


def _rnn_numpy(attrs, args, out_type):
    xproj, h0, weight, lens = args
    r = _unpack(weight)[0]
    act = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0), "sigmoid": _sigmoid}
    f = act[str(attrs.activation)]

    def step(x_row, h):
        h_next = f(_clip(x_row + h @ r.T, attrs.clip))
        return h_next, h_next

    return _run_steps(xproj, h0, lens, attrs, step)


register_op_attr("nn.contrib_lstm_sequence", "FNumpyEval", _lstm_numpy)
register_op_attr("nn.contrib_gru_sequence", "FNumpyEval", _gru_numpy)
register_op_attr("nn.contrib_rnn_sequence", "FNumpyEval", _rnn_numpy)


def _sequence_shape_func(attrs, in_dims, out_types):
    """``Y`` takes the run-time step count of ``xproj`` and the state's (static) batch and
    hidden size; the final state has the initial state's shape."""
    state = list(in_dims[1])
    return [[in_dims[0][0], *state[-2:]], state]


for _name in ("nn.contrib_lstm_sequence", "nn.contrib_gru_sequence",
              "nn.contrib_rnn_sequence"):
    register_shape_func(_name, False, _sequence_shape_func)
