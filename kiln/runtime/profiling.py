"""Timing results: :class:`BenchmarkResult` (repeated whole runs) and :class:`Report` (per op).

Entry points: :func:`time_repeats`, :class:`BenchmarkResult`, :class:`Report`.

``GraphModule.benchmark`` returns a :class:`BenchmarkResult`, TVM's summary of ``repeat``
measurements, each the mean over ``number`` back-to-back calls. The debug executor's
``profile()`` returns a :class:`Report`: one row per operator call with its duration, share
of the total and output shapes, printable as a table and exportable as CSV or JSON.
:func:`profile_function` runs one compiled function under :class:`MetricCollector` objects
(TVM's interface for performance counters; :class:`TimeCollector` is kiln's built-in one)
and returns their metrics as :class:`Count`/:class:`Duration`/:class:`Percent`/:class:`Ratio`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["BenchmarkResult", "Count", "DeviceWrapper", "Duration", "MAX_TIMING_COUNT",
           "MetricCollector", "Percent", "Ratio", "Report", "TimeCollector", "check_timing_args",
           "profile_function", "time_repeats"]

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


class _Metric:
    """A metric value of a profile (TVM's ``CountNode``/``DurationNode``/...)."""

    __slots__ = ("value",)
    kind = float

    def __init__(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise TVMError(f"{type(self).__name__}: expected a number, got {value!r}")
        self.value = self.kind(value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Count(_Metric):
    """An integer count of something (events, calls)."""

    kind = int


class Duration(_Metric):
    """A duration, in microseconds as in TVM's reports."""


class Percent(_Metric):
    """A percentage."""


class Ratio(_Metric):
    """A ratio of two quantities."""


class DeviceWrapper:
    """A device usable as a dict key (TVM wraps ``Device`` for collector maps)."""

    __slots__ = ("device",)

    def __init__(self, dev: Any) -> None:
        if not hasattr(dev, "device_type") or not hasattr(dev, "device_id"):
            raise TVMError(f"DeviceWrapper: expected a device such as kiln.cpu(0), got {dev!r}")
        self.device = dev

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceWrapper) and \
            (other.device.device_type, other.device.device_id) == \
            (self.device.device_type, self.device.device_id)

    def __hash__(self) -> int:
        return hash((self.device.device_type, self.device.device_id))

    def __repr__(self) -> str:
        return f"DeviceWrapper({self.device!r})"


class MetricCollector:
    """Collects metrics around one run (TVM's interface): ``init`` once with the devices,
    then ``start(device)`` before and ``stop(token)`` after each profiled call; ``stop``
    returns ``{metric name: Count | Duration | Percent | Ratio}``."""

    def init(self, devices: Sequence[DeviceWrapper]) -> None:
        """Prepare for ``devices`` (no-op by default)."""

    def start(self, device: DeviceWrapper) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.start")

    def stop(self, token: Any) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__}.stop")


class TimeCollector(MetricCollector):
    """Wall-clock duration of the profiled call (kiln's built-in collector: TVM's only one,
    PAPI's, needs a TVM built against libpapi)."""

    def start(self, device: DeviceWrapper) -> float:
        return time.perf_counter()

    def stop(self, token: float) -> dict[str, Any]:
        return {"Duration (us)": Duration((time.perf_counter() - token) * 1e6)}


def profile_function(mod: Any, dev: Any, collectors: Sequence[MetricCollector],
                     func_name: str | None = None, warmup_iters: int = 10) -> Callable:
    """A function taking ``mod[func_name]``'s arguments that runs it ``warmup_iters`` times,
    then once under each collector, and returns the collectors' metrics merged.

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import te
    >>> from kiln.runtime import profiling
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> f = kiln.build(te.create_schedule(B.op), [A, B], "c", name="add_one")
    >>> prof = profiling.profile_function(f, kiln.cpu(), [profiling.TimeCollector()],
    ...                                   func_name="add_one", warmup_iters=1)
    >>> a, b = kiln.nd.array(np.zeros(4, "float32")), kiln.nd.empty((4,))
    >>> sorted(prof(a, b))
    ['Duration (us)']
    """
    if isinstance(warmup_iters, bool) or not isinstance(warmup_iters, int) or warmup_iters < 0:
        raise TVMError(f"profile_function: warmup_iters must be a non-negative int, got "
                       f"{warmup_iters!r}")
    collectors = list(collectors)
    for c in collectors:
        if not isinstance(c, MetricCollector):
            raise TVMError(f"profile_function: collectors must be MetricCollector objects, got "
                           f"{type(c).__name__}")
    name = func_name if func_name is not None else mod.entry_name
    if not mod.implements_function(name, query_imports=True):
        raise TVMError(f"profile_function: the module has no function {name!r}")
    fn = mod.get_function(name, query_imports=True)
    device = DeviceWrapper(dev)
    for c in collectors:
        c.init([device])

    def profiled(*args: Any) -> dict[str, Any]:
        for _ in range(warmup_iters):
            fn(*args)
        metrics: dict[str, Any] = {}
        for c in collectors:
            token = c.start(device)
            fn(*args)
            metrics.update(c.stop(token))
        return metrics

    return profiled
