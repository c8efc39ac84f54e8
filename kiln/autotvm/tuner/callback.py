"""Callbacks run after each measured batch (TVM's ``autotvm.callback``).

Entry points: :func:`log_to_file`, :func:`progress_bar`, :class:`Monitor`,
:func:`plot_curves`.

Example
-------
>>> import io
>>> from kiln.autotvm.tuner.callback import Monitor
>>> Monitor().trial_scores()
[]
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from kiln.autotvm import record
from kiln.runtime.error import TVMError

__all__ = ["log_to_file", "progress_bar", "Monitor", "plot_curves"]


def log_to_file(file_out: Any, protocol: str = "json"):
    """A callback appending one record line per measured config to ``file_out`` (a path or
    an open file)."""
    if protocol != "json":
        raise TVMError(f"log protocol {protocol!r} is not supported; use 'json'")

    def _callback(tuner: Any, inputs: list, results: list) -> None:
        lines = "".join(record.encode(i, r, protocol) + "\n" for i, r in zip(inputs, results))
        if isinstance(file_out, str | Path):
            with open(file_out, "a") as f:
                f.write(lines)
        else:
            file_out.write(lines)
            file_out.flush()

    _callback.file_out = file_out
    return _callback


def _flops(tuner: Any, result: Any) -> float:
    return tuner.task.flop / float(np.mean(result.costs)) if result.error_no == 0 else 0.0


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G"):
    """A tqdm progress bar showing the current and best ``si_prefix``FLOPS."""
    try:
        from tqdm import tqdm
    except ImportError:
        raise TVMError("progress_bar needs tqdm: pip install 'kiln[tune]'") from None
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(si_prefix)
    if scale is None:
        raise TVMError(f"si_prefix must be one of '', K, M, G, T; got {si_prefix!r}")
    state = {"bar": None, "best": 0.0, "start": time.time()}

    def _callback(tuner: Any, inputs: list, results: list) -> None:
        if state["bar"] is None:
            state["bar"] = tqdm(total=total, desc=prefix or tuner.task.name, unit="trial",
                                leave=True)
        current = 0.0
        for res in results:
            current = _flops(tuner, res)
            state["best"] = max(state["best"], current)
        bar = state["bar"]
        bar.set_postfix_str(f"Current/Best: {current / scale:7.2f}/"
                            f"{state['best'] / scale:7.2f} {si_prefix}FLOPS")
        bar.update(len(results))
        if bar.n >= total or tuner.ttl is not None and tuner.ttl <= 0:
            bar.close()

    return _callback


class Monitor:
    """Collects every trial's score (FLOPS) and timestamp."""

    def __init__(self) -> None:
        self.scores: list[float] = []
        self.timestamps: list[float] = []

    def __call__(self, tuner: Any, inputs: list, results: list) -> None:
        for res in results:
            self.scores.append(_flops(tuner, res))
            self.timestamps.append(res.timestamp)

    def reset(self) -> None:
        self.scores, self.timestamps = [], []

    def trial_scores(self) -> list[float]:
        return list(self.scores)

    def trial_timestamps(self) -> list[float]:
        return list(self.timestamps)


def plot_curves(curves: dict[str, list[float]], path: str | Path,
                si_prefix: str = "G") -> None:
    """Draw best-so-far FLOPS against trials, one line per task, into ``path`` (needs
    matplotlib: ``pip install 'kiln[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TVMError("plotting needs matplotlib: pip install 'kiln[plot]'") from None
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[si_prefix]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, scores in curves.items():
        best = np.maximum.accumulate(np.asarray(scores, dtype="float64")) / scale
        ax.plot(np.arange(1, len(best) + 1), best, label=name)
    ax.set_xlabel("trials")
    ax.set_ylabel(f"best {si_prefix}FLOPS")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
