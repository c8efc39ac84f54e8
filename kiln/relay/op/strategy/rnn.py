"""Strategies of the fused recurrent cells (``nn.contrib_lstm_cell``, ``nn.contrib_gru_cell``,
``nn.contrib_rnn_cell``).

Entry points: the registrations made on import. Every target key gets the x86 schedule's
recipe (lane blocks, gate products in registers, the epilogue in the same task): it uses only
split/reorder/unroll/vectorize/compute_at, which the C and LLVM codegens print on any CPU.
"""

from __future__ import annotations

from kiln.relay.op.strategy.generic import wrap_strategy
from kiln.relay.op.strategy.registry import register_strategy
from kiln.topi.nn import rnn
from kiln.topi.x86 import rnn as x86_rnn

__all__: list[str] = []


def _lstm_compute(attrs, inputs, out_type, config=None):
    return [rnn.lstm_cell(inputs[0], inputs[1], inputs[2], inputs[3], attrs.clip,
                          int(attrs.offset))]


def _gru_compute(attrs, inputs, out_type, config=None):
    return [rnn.gru_cell(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4],
                         bool(attrs.linear_before_reset), attrs.clip, int(attrs.offset))]


def _rnn_compute(attrs, inputs, out_type, config=None):
    return [rnn.rnn_cell(inputs[0], inputs[1], inputs[2], inputs[3], str(attrs.activation),
                         attrs.clip, int(attrs.offset))]


for _key in ("generic", "cpu"):
    register_strategy("nn.contrib_rnn_cell", _key)(wrap_strategy(
        _rnn_compute,
        lambda attrs, outs, target, config=None: x86_rnn.schedule_rnn_cell(outs, config),
        f"rnn_cell.{'x86' if _key == 'cpu' else 'generic'}",
        config=x86_rnn.DEFAULT_CONFIG, op_name="nn.contrib_rnn_cell"))
    register_strategy("nn.contrib_lstm_cell", _key)(wrap_strategy(
        _lstm_compute,
        lambda attrs, outs, target, config=None: x86_rnn.schedule_lstm_cell(outs, config),
        f"lstm_cell.{'x86' if _key == 'cpu' else 'generic'}",
        config=x86_rnn.DEFAULT_CONFIG, op_name="nn.contrib_lstm_cell"))
    register_strategy("nn.contrib_gru_cell", _key)(wrap_strategy(
        _gru_compute,
        lambda attrs, outs, target, config=None: x86_rnn.schedule_gru_cell(outs, config),
        f"gru_cell.{'x86' if _key == 'cpu' else 'generic'}",
        config=x86_rnn.DEFAULT_CONFIG, op_name="nn.contrib_gru_cell"))
