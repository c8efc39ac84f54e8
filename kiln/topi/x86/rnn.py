"""x86 schedules of the recurrent layers (``lstm_sequence.x86``, ``gru_sequence.x86``,
``rnn_sequence.x86``).

Entry points: :func:`schedule_rnn_sequence`, :data:`DEFAULT_CONFIG` (``parallel_min_macs``:
the per-step product size from which the kernel splits each step's hidden blocks over kiln's
thread pool).

The loop nest is the C kernel of :mod:`kiln.topi.nn.rnn` (register-blocked gate products, the
gate epilogue per block, one pool launch per sequence with a barrier per step); the schedule
has nothing left to arrange. The parallel split pays from a few hundred thousand
multiply-adds a step (a batch-1 LSTM of hidden size 256 is 262,144): below that the barrier
costs more than the second thread saves.

Example
-------
>>> from kiln import te
>>> from kiln.topi.nn.rnn import lstm_sequence
>>> from kiln.topi.x86.rnn import schedule_rnn_sequence
>>> outs = lstm_sequence(te.placeholder((4, 1, 64)), te.placeholder((2, 1, 16)),
...                      te.placeholder((1, 16, 4, 16)), te.placeholder((1,), "int32"))
>>> s = schedule_rnn_sequence(outs)
>>> s[outs[0].op].op.name
'lstm_sequence'
"""

from __future__ import annotations

from typing import Any

from kiln import te

__all__ = ["schedule_rnn_sequence", "DEFAULT_CONFIG"]

DEFAULT_CONFIG = {"parallel_min_macs": 65_536}


def schedule_rnn_sequence(outs: Any, config: dict | None = None) -> Any:
    """Schedule :func:`~kiln.topi.nn.rnn.lstm_sequence` (and the GRU / RNN ones): the
    extern kernel as it is."""
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    return te.create_schedule([t.op for t in outs])
