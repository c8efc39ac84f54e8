"""Strategies of the recurrent layers (``nn.contrib_lstm_sequence``,
``nn.contrib_gru_sequence``, ``nn.contrib_rnn_sequence``).

Entry points: the registrations made on import. Every target key gets the same
implementation: the kernel is portable C (vectorized by the compiler), and kiln's thread pool
(``TVMBackendParallelLaunch``) is there on every host target; the CRT runs its tasks inline.
"""

from __future__ import annotations

from kiln.relay.op.strategy.generic import wrap_strategy
from kiln.relay.op.strategy.registry import register_strategy
from kiln.topi.nn import rnn
from kiln.topi.x86 import rnn as x86_rnn

__all__: list[str] = []


def _parallel_min_macs(config) -> int:
    return int({**x86_rnn.DEFAULT_CONFIG, **(config or {})}["parallel_min_macs"])


def _lstm_compute(attrs, inputs, out_type, config=None):
    return rnn.lstm_sequence(inputs[0], inputs[1], inputs[2], inputs[3], attrs.clip,
                             bool(attrs.reverse), _parallel_min_macs(config))


def _gru_compute(attrs, inputs, out_type, config=None):
    return rnn.gru_sequence(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4],
                            bool(attrs.linear_before_reset), attrs.clip, bool(attrs.reverse),
                            _parallel_min_macs(config))


def _rnn_compute(attrs, inputs, out_type, config=None):
    return rnn.rnn_sequence(inputs[0], inputs[1], inputs[2], inputs[3], str(attrs.activation),
                            attrs.clip, bool(attrs.reverse), _parallel_min_macs(config))


def _schedule(attrs, outs, target, config=None):
    return x86_rnn.schedule_rnn_sequence(outs, config)


for _key in ("generic", "cpu"):
    _suffix = "x86" if _key == "cpu" else "generic"
    for _kind, _compute in (("lstm", _lstm_compute), ("gru", _gru_compute),
                            ("rnn", _rnn_compute)):
        _op_name = f"nn.contrib_{_kind}_sequence"
        register_strategy(_op_name, _key)(wrap_strategy(
            _compute, _schedule, f"{_kind}_sequence.{_suffix}",
            config=x86_rnn.DEFAULT_CONFIG, op_name=_op_name))
