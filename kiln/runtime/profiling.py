"""Timing results: :class:`BenchmarkResult` (repeated whole runs) and :class:`Report` (per op).

Entry points: :func:`time_repeats`, :class:`BenchmarkResult`, :class:`Report`.

``GraphModule.benchmark`` returns a :class:`BenchmarkResult`, TVM's summary of ``repeat``
measurements, each the mean over ``number`` back-to-back calls. The debug executor's
``profile()`` returns a :class:`Report`: one row per operator call with its duration, share
of the total and output shapes, printable as a table and exportable as CSV or JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["BenchmarkResult", "Report", "time_repeats", "check_timing_args", "MAX_TIMING_COUNT"]

MAX_TIMING_COUNT = (1 << 31) - 1  # TVM's time evaluator takes number/repeat as a C int


class BenchmarkResult:
    """Summary statistics (in seconds) of repeated timing measurements.

    Parameters
    ----------
    results : sequence of float
        One measured time per repeat, in seconds.

    Example
    -------
    >>> r = BenchmarkResult([0.002, 0.001, 0.003])
    >>> (r.min, r.median, r.max)
    (0.001, 0.002, 0.003)
    """

    def __init__(self, results: Sequence[float]) -> None:
        self.results = [float(t) for t in results]
        if not self.results:
            raise TVMError("BenchmarkResult needs at least one measurement")
        values = np.asarray(self.results, dtype=np.float64)
        self.mean = float(values.mean())
        self.median = float(np.median(values))
        self.min = float(values.min())
        self.max = float(values.max())
        self.std = float(values.std())

    def __repr__(self) -> str:
        return (
            f"BenchmarkResult(min={self.min}, mean={self.mean}, median={self.median}, "
            f"max={self.max}, std={self.std}, results={self.results})"
        )

    def __str__(self) -> str:
        names = ("mean", "median", "max", "min", "std")
        header = "".join(f"{name + ' (ms)':>14}" for name in names)
        values = "".join(f"{getattr(self, name) * 1e3:>14.4f}" for name in names)
        return f"Execution time summary:\n{header}\n{values}\n"


def time_repeats(
    run: Callable[[int], None],
    repeat: int = 5,
    number: int = 5,
    min_repeat_ms: float | None = None,
    *,
    limit_zero_time_iterations: int = 100,
    cooldown_interval_ms: float = 0,
    repeats_to_cooldown: int = 1,
    before_repeat: Callable[[], None] | None = None,
) -> BenchmarkResult:
    """Time ``run(number)`` (which performs ``number`` calls) ``repeat`` times.

    One untimed warm-up call comes first. With ``min_repeat_ms``, ``number`` grows (as TVM's
    time evaluator does) until one repeat lasts at least that long. A repeat measured as zero
    seconds is retried up to ``limit_zero_time_iterations`` times; every
    ``repeats_to_cooldown`` repeats the loop sleeps ``cooldown_interval_ms``.
    ``before_repeat`` (untimed) runs before each timing, e.g. to flush caches.

    Example
    -------
    >>> result = time_repeats(lambda n: sum(range(100 * n)), repeat=3, number=2)
    >>> len(result.results)
    3
    """
    check_timing_args(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                      limit_zero_time_iterations=limit_zero_time_iterations,
                      cooldown_interval_ms=cooldown_interval_ms,
                      repeats_to_cooldown=repeats_to_cooldown)
    run(1)
    results = []
    for index in range(repeat):
        zero_time_retries = 0
        while True:
            if before_repeat is not None:
                before_repeat()
            start = time.perf_counter()
            run(number)
            elapsed = time.perf_counter() - start
            if elapsed <= 0 and zero_time_retries < limit_zero_time_iterations:
                zero_time_retries += 1
                continue
            if not min_repeat_ms or elapsed * 1e3 >= min_repeat_ms:
                break
            per_call_ms = max(elapsed * 1e3 / number, 1e-6)
            number = min(max(int(min_repeat_ms / per_call_ms) + 1, int(number * 1.618)),
                         MAX_TIMING_COUNT)
        results.append(elapsed / number)
        if cooldown_interval_ms > 0 and (index + 1) % max(repeats_to_cooldown, 1) == 0:
            time.sleep(cooldown_interval_ms / 1e3)
    return BenchmarkResult(results)


def check_timing_args(number: Any = 1, repeat: Any = 1, min_repeat_ms: Any = 0,
                      limit_zero_time_iterations: Any = 0, cooldown_interval_ms: Any = 0,
                      repeats_to_cooldown: Any = 1, cache_flush_bytes: Any = 0) -> None:
    """Refuse time-evaluator arguments TVM's C++ evaluator could not take (a TVMError naming
    the argument), before any run: counts are C ints, durations are not negative.

    Example
    -------
    >>> check_timing_args(number=2**40)
    Traceback (most recent call last):
    ...
    kiln.runtime.error.TVMError: time evaluator: number must be an integer in [1, 2147483647], \
got 1099511627776
    """
    counts = (("number", number, 1), ("repeat", repeat, 1),
              ("repeats_to_cooldown", repeats_to_cooldown, 1),
              ("limit_zero_time_iterations", limit_zero_time_iterations, 0))
    for name, value, low in counts:
        if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                or not low <= value <= MAX_TIMING_COUNT):
            raise TVMError(f"time evaluator: {name} must be an integer in [{low}, "
                           f"{MAX_TIMING_COUNT}], got {value!r}")
    for name, value in (("min_repeat_ms", min_repeat_ms),
                        ("cooldown_interval_ms", cooldown_interval_ms),
                        ("cache_flush_bytes", cache_flush_bytes)):
        if value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float, np.number))
                or not 0 <= value < float("inf")):
            raise TVMError(f"time evaluator: {name} must be a finite number >= 0, "
                           f"got {value!r}")


class Report:
    """A per-operator profile: one row per call, plus whole-run metrics.

    Parameters
    ----------
    calls : list of dict
        One dict per operator call. Keys used by :meth:`table`: ``"Name"``, ``"Op"``,
        ``"Duration (us)"``, ``"Percent"``, ``"Count"``, ``"Device"``, ``"Output Shapes"``.
    device_metrics : dict
        Per device, whole-run metrics such as ``{"Duration (us)": 12.0}``.
    configuration : dict, optional
        How the profile was taken (e.g. ``{"Executor": "Graph", "Number": 10}``).

    Example
    -------
    >>> report = Report([{"Name": "add0", "Op": "add", "Duration (us)": 3.0, "Percent": 100.0,
    ...                   "Count": 1, "Device": "cpu0", "Output Shapes": "[(1, 10)]"}],
    ...                 {"cpu0": {"Duration (us)": 3.0}})
    >>> "add0" in report.table()
    True
    """

    COLUMNS = ("Name", "Op", "Duration (us)", "Percent", "Count", "Device", "Output Shapes")

    def __init__(
        self,
        calls: list[dict[str, Any]],
        device_metrics: dict[str, dict[str, Any]],
        configuration: dict[str, Any] | None = None,
    ) -> None:
        self.calls = list(calls)
        self.device_metrics = dict(device_metrics)
        self.configuration = dict(configuration or {})

    def aggregated(self) -> list[dict[str, Any]]:
        """Rows merged by ``(Op, Device)``: durations, percents and counts summed."""
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for call in self.calls:
            key = (call.get("Op", call.get("Name", "")), call.get("Device", ""))
            row = merged.get(key)
            if row is None:
                merged[key] = {**call, "Name": key[0], "Count": call.get("Count", 1)}
                continue
            row["Duration (us)"] += call["Duration (us)"]
            row["Percent"] += call["Percent"]
            row["Count"] += call.get("Count", 1)
        return list(merged.values())

    def table(self, sort: bool = True, aggregate: bool = False, col_sums: bool = True) -> str:
        """A human-readable table, longest first when ``sort``; a ``Sum`` row when ``col_sums``."""
        rows = self.aggregated() if aggregate else [dict(c) for c in self.calls]
        if sort:
            rows.sort(key=lambda r: -r["Duration (us)"])
        if col_sums:
            rows.append(
                {
                    "Name": "Sum",
                    "Duration (us)": sum(r["Duration (us)"] for r in rows),
                    "Percent": sum(r["Percent"] for r in rows),
                    "Count": sum(r.get("Count", 1) for r in rows),
                }
            )
        cells = [list(self.COLUMNS)]
        cells += [[_format_cell(row.get(c, "")) for c in self.COLUMNS] for row in rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(self.COLUMNS))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        for name, metrics in self.device_metrics.items():
            pairs = ", ".join(f"{k}: {_format_cell(v)}" for k, v in metrics.items())
            lines.append(f"Total on {name}: {pairs}")
        for key, value in self.configuration.items():
            lines.append(f"{key}: {value}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def csv(self) -> str:
        """The calls as CSV (header row first)."""
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(self.COLUMNS), extrasaction="ignore")
        writer.writeheader()
        for call in self.calls:
            writer.writerow(call)
        return buffer.getvalue()

    def json(self) -> str:
        """The report as JSON with keys ``calls``, ``device_metrics`` and ``configuration``."""
        return json.dumps(
            {
                "calls": self.calls,
                "device_metrics": self.device_metrics,
                "configuration": self.configuration,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Rebuild a report written by :meth:`json`."""
        try:
            data = json.loads(text)
            return cls(data["calls"], data["device_metrics"], data.get("configuration"))
        except (ValueError, KeyError, TypeError) as err:
            raise TVMError(f"not a profiling report JSON: {err}") from None


def _format_cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
