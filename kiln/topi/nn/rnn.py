"""Fused recurrent cells: one time step of an LSTM, GRU or simple RNN as one kernel.

Entry points: :func:`lstm_cell`, :func:`gru_cell`, :func:`rnn_cell`,
:func:`packed_recurrent_weight_shape`.

A recurrent layer spends its time in the per-step product of the hidden state with the
recurrent weight ``R`` (``[G * H, H]`` for ``G`` gates, ONNX's gate order) and the gate
arithmetic after it. The input projection of every step is one GEMM computed before the loop
(``xproj [T, B, G * H]``, input biases and the biases that add outside a gate's product
included); a cell reads row ``step + offset`` of it, ``step`` a 0-d int32 tensor (so every step
of a layer runs the same compiled kernel), clamped into ``[0, T)``; the constant ``offset``
lets a loop unrolled ``U`` times read rows ``t .. t + U - 1`` from one ``t``. ``R`` arrives
packed as ``[H / n, H, G, n]``, ``packed[jb, k, q, ji] = R[q * H + jb * n + ji, k]``: for a
block of ``n`` hidden units the products of all ``G`` gates read one contiguous run of ``G *
n`` floats per ``k``, and the gate epilogue of those units runs right after them, with no ``[B,
G * H]`` buffer. ``tanh`` is ``fast_tanh`` in float32 (error below 8e-7), which vectorizes
where libm's ``tanhf`` does not.

Example
-------
>>> from kiln import te
>>> from kiln.topi.nn.rnn import lstm_cell
>>> out = lstm_cell(te.placeholder((4, 1, 64)), te.placeholder((2, 1, 16)),
...                 te.placeholder((1, 16, 4, 16)), te.placeholder((), "int32"))
>>> [int(d) for d in out.shape]
[2, 1, 16]
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.topi.math import UNARY
from kiln.topi.utils import get_const_int

__all__ = ["lstm_cell", "gru_cell", "rnn_cell", "packed_recurrent_weight_shape",
           "RNN_ACTIVATIONS"]


def packed_recurrent_weight_shape(hidden: int, gates: int, lanes: int) -> tuple[int, ...]:
    """The packed layout ``[H / n, H, G, n]`` of a ``[G * H, H]`` recurrent weight."""
    if hidden % lanes:
        raise TVMError(f"recurrent weight packing: hidden size {hidden} is not a multiple of "
                       f"{lanes} lanes")
    return (hidden // lanes, hidden, gates, lanes)


def _check(op_name: str, xproj: te.Tensor, hidden_in: te.Tensor, weight: te.Tensor,
           gates: int) -> tuple[int, int, int]:
    """(batch, hidden, lanes) after checking the operand shapes agree."""
    batch, width = (get_const_int(d) for d in xproj.shape[1:])
    blocks, k, g, lanes = (get_const_int(d) for d in weight.shape)
    hidden = blocks * lanes
    if g != gates or k != hidden or width != gates * hidden:
        raise TVMError(f"{op_name}: weight {[blocks, k, g, lanes]} does not pack {gates} gates "
                       f"of the projected input's width {width}")
    if get_const_int(hidden_in.shape[-1]) != hidden or \
            get_const_int(hidden_in.shape[-2]) != batch:
        raise TVMError(f"{op_name}: state {[get_const_int(d) for d in hidden_in.shape]} does "
                       f"not match batch {batch} and hidden size {hidden}")
    return batch, hidden, lanes


def _row(step: te.Tensor, steps: Any, offset: int) -> Any:
    """The projection row a cell reads: ``step + offset`` clamped into ``[0, T)``."""
    index = _op.cast(step(), "int32") if len(step.shape) == 0 else _op.cast(step[0], "int32")
    return _op.min(_op.max(index + offset, 0), _op.cast(steps, "int32") - 1)


def _tanh(x: Any) -> Any:
    # fast_tanh (error below 8e-7) vectorizes; libm's tanhf is called lane by lane
    return UNARY["fast_tanh"](x)


def _clipped(x: Any, clip: float | None) -> Any:
    if clip is None:
        return x
    return _op.min(_op.max(x, _op.const(-clip, x.dtype)), _op.const(clip, x.dtype))


def _gate_products(name: str, h: Any, weight: te.Tensor, batch: int, gates: range,
                   dtype: str) -> te.Tensor:
    """``[B, H / n, len(gates), n]``: ``h[b] @ R_q.T`` for each gate ``q`` in ``gates``."""
    blocks, k, _, lanes = (get_const_int(d) for d in weight.shape)
    red = te.reduce_axis((0, k), name="k")
    first = gates.start
    return te.compute(
        (batch, blocks, len(gates), lanes),
        lambda b, jb, q, ji: te.sum(h(b, red.var) * weight[jb, red.var, q + first, ji],
                                    axis=red),
        name=name, tag=f"{name}", attrs={"dtype": dtype})


def lstm_cell(xproj: te.Tensor, state: te.Tensor, weight: te.Tensor, step: te.Tensor,
              clip: float | None = None, offset: int = 0) -> te.Tensor:
    """One LSTM step with ONNX's default activations (sigmoid, tanh, tanh), gates i, o, f, c.

    ``state`` is ``[2, B, H]`` (hidden, cell); the result is the next state, same layout::

        pre_q = xproj[step, b, q*H + j] + h @ R_q.T      (clipped to ±clip when given)
        c' = sigmoid(pre_f) * c + sigmoid(pre_i) * tanh(pre_c)
        h' = sigmoid(pre_o) * tanh(c')
    """
    batch, hidden, lanes = _check("lstm_cell", xproj, state, weight, 4)
    row = _row(step, xproj.shape[0], offset)
    products = _gate_products("lstm_gates", lambda b, k: state[0, b, k], weight, batch,
                              range(4), state.dtype)

    def pre(q, b, j):
        return _clipped(products[b, j // lanes, q, j % lanes] + xproj[row, b, q * hidden + j],
                        clip)

    cell = te.compute(
        (batch, hidden),
        lambda b, j: _op.sigmoid(pre(2, b, j)) * state[1, b, j]
        + _op.sigmoid(pre(0, b, j)) * _tanh(pre(3, b, j)),
        name="lstm_c")
    return te.compute(
        (2, batch, hidden),
        lambda s, b, j: _op.if_then_else(
            s == 0, _op.sigmoid(pre(1, b, j)) * _tanh(cell[b, j]), cell[b, j]),
        name="lstm_state", tag="lstm_cell")


def gru_cell(xproj: te.Tensor, hidden_state: te.Tensor, weight: te.Tensor, hbias: te.Tensor,
             step: te.Tensor, linear_before_reset: bool, clip: float | None = None,
             offset: int = 0) -> te.Tensor:
    """One GRU step with ONNX's default activations (sigmoid, tanh), gates z, r, h.

    ``hidden_state`` is ``[B, H]``; ``hbias`` (``[H]``) is the candidate gate's recurrent
    bias ``Rbh`` (``xproj`` holds every other bias)::

        z = sigmoid(xz + h @ Rz.T), r = sigmoid(xr + h @ Rr.T)
        n = tanh(xh + r * (h @ Rh.T + Rbh))        linear_before_reset
        n = tanh(xh + (r * h) @ Rh.T + Rbh)        otherwise
        h' = (1 - z) * n + z * h
    """
    batch, hidden, lanes = _check("gru_cell", xproj, hidden_state, weight, 3)
    row = _row(step, xproj.shape[0], offset)

    def x(q, b, j):
        return xproj[row, b, q * hidden + j]

    def gate(products, q, b, j):
        return _op.sigmoid(_clipped(products[b, j // lanes, q, j % lanes] + x(q, b, j), clip))

    dtype = hidden_state.dtype
    h = hidden_state
    if linear_before_reset:
        products = _gate_products("gru_gates", lambda b, k: h[b, k], weight, batch, range(3),
                                  dtype)

        def candidate(b, j):
            recurrent = products[b, j // lanes, 2, j % lanes] + hbias[j]
            return _tanh(_clipped(x(2, b, j) + gate(products, 1, b, j) * recurrent, clip))

        zr = products
    else:
        zr = _gate_products("gru_gates", lambda b, k: h[b, k], weight, batch, range(2), dtype)
        reset = te.compute((batch, hidden), lambda b, j: gate(zr, 1, b, j) * h[b, j],
                           name="gru_reset")
        hh = _gate_products("gru_candidate", lambda b, k: reset[b, k], weight, batch,
                            range(2, 3), dtype)

        def candidate(b, j):
            recurrent = hh[b, j // lanes, 0, j % lanes] + hbias[j]
            return _tanh(_clipped(x(2, b, j) + recurrent, clip))

    one = _op.const(1.0, dtype)
    return te.compute(
        (batch, hidden),
        lambda b, j: (one - gate(zr, 0, b, j)) * candidate(b, j) + gate(zr, 0, b, j) * h[b, j],
        name="gru_state", tag="gru_cell")


# The activations a fused simple-RNN cell applies (ONNX names, lower case; none takes alpha).
RNN_ACTIVATIONS = {
    "tanh": _tanh,
    "relu": lambda x: _op.max(x, _op.const(0.0, x.dtype)),
    "sigmoid": _op.sigmoid,
}


def rnn_cell(xproj: te.Tensor, hidden_state: te.Tensor, weight: te.Tensor, step: te.Tensor,
             activation: str = "tanh", clip: float | None = None, offset: int = 0) -> te.Tensor:
    """One simple-RNN step: ``h' = f(xproj[step] + h @ R.T)`` (clipped before ``f``).

    ``hidden_state`` is ``[B, H]``; ``f`` is one of :data:`RNN_ACTIVATIONS`.
    """
    if activation not in RNN_ACTIVATIONS:
        raise TVMError(f"rnn_cell: activation {activation!r} is not one of "
                       f"{sorted(RNN_ACTIVATIONS)}")
    batch, hidden, lanes = _check("rnn_cell", xproj, hidden_state, weight, 1)
    row = _row(step, xproj.shape[0], offset)
    h = hidden_state
    products = _gate_products("rnn_gates", lambda b, k: h[b, k], weight, batch, range(1),
                              h.dtype)
    act = RNN_ACTIVATIONS[activation]
    return te.compute(
        (batch, hidden),
        lambda b, j: act(_clipped(products[b, j // lanes, 0, j % lanes] + xproj[row, b, j],
                                  clip)),
        name="rnn_state", tag="rnn_cell")
