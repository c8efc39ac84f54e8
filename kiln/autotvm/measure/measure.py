"""Measurement records and the builder/runner interfaces (TVM's ``autotvm.measure.measure``).

Entry points: :class:`MeasureInput`, :class:`MeasureResult`, :class:`MeasureErrorNo`,
:class:`BuildResult`, :class:`Builder`, :class:`Runner`, :func:`measure_option`,
:func:`create_measure_batch`.

A measurement builds candidates (a :class:`Builder`, ``n_parallel`` at a time) and then times
them (a :class:`Runner`). Any failure — instantiation, compilation, a crash, a timeout —
becomes a :class:`MeasureResult` with its :class:`MeasureErrorNo`; it never stops tuning.

Example
-------
>>> from kiln import autotvm
>>> option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1),
...                                 runner=autotvm.LocalRunner(number=1))
>>> sorted(option)
['builder', 'runner']
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from kiln.runtime.error import TVMError

__all__ = ["MeasureInput", "MeasureResult", "MeasureErrorNo", "BuildResult", "Builder",
           "Runner", "measure_option", "create_measure_batch"]


class MeasureInput(NamedTuple):
    """What is measured: a target, a task, and one config of its space."""

    target: Any
    task: Any
    config: Any


class MeasureResult(NamedTuple):
    """``costs`` (seconds per run, or the error), ``error_no``, ``all_cost`` (seconds spent
    building and measuring) and ``timestamp``."""

    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float


class MeasureErrorNo(enum.IntEnum):
    """Why a measurement failed (TVM's numbering, written into logs)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


class BuildResult(NamedTuple):
    """A built candidate: ``filename`` of its library and ``arg_info`` (shape, dtype) per
    argument, or the ``error`` that stopped it; ``time_cost`` seconds."""

    filename: str | None
    arg_info: list | None
    error: Any
    time_cost: float
    error_no: int = 0


class Builder:
    """Builds candidates, ``n_parallel`` at a time."""

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_kwargs: dict | None = None) -> None:
        import os

        self.timeout = float(timeout)
        self.n_parallel = int(n_parallel or os.cpu_count() or 1)
        if self.n_parallel < 1:
            raise TVMError(f"Builder n_parallel must be at least 1, got {n_parallel}")
        self.user_build_kwargs = build_kwargs or {}
        self.build_kwargs: dict = {}
        self.task = None

    def set_task(self, task: Any, build_kwargs: dict | None = None) -> None:
        self.task = task
        self.build_kwargs = {**self.user_build_kwargs, **(build_kwargs or {})}

    def build(self, measure_inputs: list) -> list[BuildResult]:
        raise NotImplementedError

    def close(self) -> None:
        """Stop worker processes (a builder is reusable after it: workers restart)."""


class Runner:
    """Times built candidates."""

    def __init__(self, timeout: float = 5, n_parallel: int | None = None) -> None:
        self.timeout = float(timeout)
        self.n_parallel = int(n_parallel or 1)
        self.task = None

    def set_task(self, task: Any) -> None:
        self.task = task

    def get_build_kwargs(self) -> dict:
        return {}

    def run(self, measure_inputs: list, build_results: list) -> list[MeasureResult]:
        raise NotImplementedError

    def close(self) -> None:
        """Stop worker processes."""


def measure_option(builder: Any, runner: Any, cluster: str | None = None) -> dict:
    """The measurement setup ``tuner.tune`` uses: ``{"builder": ..., "runner": ...}``.

    ``builder`` may be ``"local"`` and ``runner`` ``"local"`` (the defaults' shorthand).

    ``cluster`` (kiln's addition) moves the same measurement onto Ray: ``"ray"`` (the Ray
    this process joined, else a new local one), ``"ray://HEAD:10001"`` (Ray Client) or
    ``"ray:ADDRESS"`` for any address ``ray.init`` takes (``"ray:auto"``,
    ``"ray:HEAD:6379"``). A ``LocalBuilder``/``LocalRunner`` (or ``"local"``) becomes a
    ``RayBuilder``/``RayRunner`` with the same timeout and timing settings; Ray builders and
    runners are kept as given.

    Example
    -------
    >>> from kiln import autotvm
    >>> option = autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=8),
    ...                                 cluster="ray")   # doctest: +SKIP
    >>> option["runner"].number                          # doctest: +SKIP
    8
    """
    from kiln.autotvm.measure.measure_methods import LocalBuilder, LocalRunner

    builder = LocalBuilder() if builder == "local" else builder
    runner = LocalRunner() if runner == "local" else runner
    if not isinstance(builder, Builder):
        raise TVMError(f"measure_option: builder must be an autotvm Builder, got {builder!r}")
    if not isinstance(runner, Runner):
        raise TVMError(f"measure_option: runner must be an autotvm Runner, got {runner!r}")
    if cluster is not None:
        from kiln.autotvm.measure.ray_methods import on_ray

        builder, runner = on_ray(builder, runner, cluster)
    return {"builder": builder, "runner": runner}


def create_measure_batch(task: Any, option: dict):
    """``measure_batch(inputs) -> results`` for ``task`` with ``option``'s builder/runner."""
    builder, runner = option["builder"], option["runner"]
    runner.set_task(task)
    builder.set_task(task, runner.get_build_kwargs())

    def measure_batch(measure_inputs: list) -> list[MeasureResult]:
        build_results = builder.build(measure_inputs)
        return runner.run(measure_inputs, build_results)

    measure_batch.n_parallel = builder.n_parallel
    return measure_batch
