"""Builders and runners: compile candidates in worker processes, time them locally or over RPC.

Entry points: :class:`LocalBuilder`, :class:`LocalRunner`, :class:`RPCRunner`, and the
per-candidate steps :func:`build_candidate` / :func:`time_candidate` (also run by the Ray
builder and runner).

``LocalBuilder`` instantiates and compiles ``n_parallel`` candidates at once, each in a
worker process, and exports each as a shared library. ``LocalRunner`` times them one at a
time in one worker process of its own (a crash or hang costs only that candidate);
``RPCRunner`` asks a tracker for a device of ``key`` per candidate, uploads the library and
times it there. Timing follows TVM: ``repeat`` measurements, each the mean of ``number``
runs (``number`` grows until a measurement lasts ``min_repeat_ms``); with more than two
measurements the fastest and slowest are dropped; ``cooldown_interval`` seconds of sleep
follow each candidate; ``enable_cpu_cache_flush`` evicts the caches before each run (set
``number=1`` then).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from typing import Any

from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.measure.measure import (
    Builder,
    BuildResult,
    MeasureErrorNo,
    MeasureResult,
    Runner,
)
from kiln.autotvm.measure.worker import WorkerPool
from kiln.runtime.error import TVMError

__all__ = ["LocalBuilder", "LocalRunner", "RPCRunner", "build_candidate", "time_candidate",
           "results_of_runs", "ENTRY_NAME"]

# name of the kernel in each candidate's library
ENTRY_NAME = "default_function"


def build_candidate(measure_input: Any, tmp_dir: str, build_kwargs: dict | None = None,
                    build_func: Any = None) -> BuildResult:
    """Instantiate and compile one candidate into ``tmp_dir`` (runs in a worker): a shared
    library, or what ``build_func(module, tensors, tmp_dir, target)`` makes of the module
    (e.g. a microcontroller program, :func:`kiln.micro.autotvm_build_func`)."""
    import kiln

    start = time.perf_counter()
    task, config = measure_input.task, measure_input.config
    GLOBAL_SCOPE.in_tuning = True
    try:
        sch, args = task.instantiate(config)
    except Exception as err:  # any template failure is this candidate's, not the run's
        return BuildResult(None, None, f"InstantiationError: {err}"[:1024],
                           time.perf_counter() - start, MeasureErrorNo.INSTANTIATION_ERROR)
    finally:
        GLOBAL_SCOPE.in_tuning = False
    try:
        module = kiln.build(sch, args, task.target, name=ENTRY_NAME)
        if build_func is None:
            path = os.path.join(tmp_dir, f"tmp_func_{secrets.token_hex(8)}.so")
            module.export_library(path)
    except Exception as err:
        return BuildResult(None, None, f"{type(err).__name__}: {err}"[:1024],
                           time.perf_counter() - start, MeasureErrorNo.COMPILE_HOST)
    if build_func is not None:
        try:
            path = build_func(module, args, tmp_dir, task.target)
        except Exception as err:  # the device toolchain rejected the candidate
            return BuildResult(None, None, f"{type(err).__name__}: {err}"[:1024],
                               time.perf_counter() - start, MeasureErrorNo.COMPILE_DEVICE)
    arg_info = [(tuple(int(d) for d in t.shape), str(t.dtype)) for t in args]
    return BuildResult(path, arg_info, None, time.perf_counter() - start)


_FLUSH_BYTES = 64 << 20  # larger than any last-level cache of these machines


def time_candidate(filename: str, arg_info: list, number: int, repeat: int,
                   min_repeat_ms: float, enable_cpu_cache_flush: bool = False,
                   session: Any = None) -> tuple[float, ...]:
    """Seconds per run of a built candidate, ``repeat`` measurements (min and max dropped
    when more than two), here or in an RPC ``session``."""
    import numpy as np

    import kiln

    if session is None:
        module, dev = kiln.runtime.load_module(filename), kiln.cpu(0)
    else:
        session.upload(filename)
        module, dev = session.load_module(os.path.basename(filename)), session.cpu(0)
    rng = np.random.default_rng(0)
    args = []
    for shape, dtype in arg_info:
        if dtype.startswith("float"):
            host = rng.random(shape, dtype="float64").astype(dtype)
        else:
            host = np.zeros(shape, dtype)
        args.append(kiln.nd.array(host, dev))
    if enable_cpu_cache_flush and session is None:
        costs = _time_flushed(module, args, number, repeat)
    else:
        timer = module.time_evaluator(ENTRY_NAME, dev, number=number, repeat=repeat,
                                      min_repeat_ms=min_repeat_ms)
        costs = list(timer(*args).results)
    if len(costs) > 2:
        costs = sorted(costs)[1:-1]
    return tuple(float(c) for c in costs)


def _time_flushed(module: Any, args: list, number: int, repeat: int) -> list[float]:
    """Each run after writing a buffer larger than the caches (TVM's cache flush)."""
    import numpy as np

    func = module.get_function(ENTRY_NAME)
    call = func.prepare(*args) if hasattr(func, "prepare") else (lambda: func(*args))
    scratch = np.empty(_FLUSH_BYTES // 8)
    costs = []
    for _ in range(repeat):
        total = 0.0
        for _ in range(number):
            scratch.fill(1.0)
            start = time.perf_counter()
            call()
            total += time.perf_counter() - start
        costs.append(total / number)
    return costs


def results_of_runs(build_results: list, outcomes: list) -> list[MeasureResult]:
    """MeasureResults from build results and per-candidate run outcomes ``(status, value)``
    (``("skip", None)`` for a candidate that did not build)."""
    results = []
    for build, (status, value) in zip(build_results, outcomes):
        now = time.time()
        if build.error is not None:
            results.append(MeasureResult((build.error,), int(build.error_no), build.time_cost,
                                         now))
        elif status == "ok":
            results.append(MeasureResult(tuple(value), MeasureErrorNo.NO_ERROR,
                                         build.time_cost + sum(value), now))
        elif status == "timeout":
            results.append(MeasureResult((f"run timed out after {value:g} s",),
                                         MeasureErrorNo.RUN_TIMEOUT, build.time_cost + value,
                                         now))
        elif status == "crash":
            results.append(MeasureResult((f"the measuring process died (exit code {value})",),
                                         MeasureErrorNo.RUNTIME_DEVICE, build.time_cost, now))
        else:
            results.append(MeasureResult((str(value),), MeasureErrorNo.RUNTIME_DEVICE,
                                         build.time_cost, now))
    return results


class LocalBuilder(Builder):
    """Compile candidates in ``n_parallel`` worker processes (TVM's ``LocalBuilder``).

    A candidate whose build takes longer than ``timeout`` seconds is recorded as
    ``BUILD_TIMEOUT`` and its worker restarted. ``build_func`` is ``"default"`` (a shared
    library for this machine) or a function that makes the built module into what the
    runner measures, ``build_func(module, tensors, tmp_dir, target) -> path``, e.g.
    :func:`kiln.micro.autotvm_build_func` (a Cortex-M program for QEMU).
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None,
                 build_kwargs: dict | None = None, build_func: str = "default",
                 do_fork: bool = False, runtime: Any = None) -> None:
        super().__init__(timeout, n_parallel, build_kwargs)
        if not callable(build_func) and build_func not in ("default", "so"):
            raise TVMError(f"LocalBuilder: build_func {build_func!r} is not supported; kiln "
                           "exports candidates as shared libraries ('default') or through "
                           "a function such as kiln.micro.autotvm_build_func")
        self.build_func = build_func if callable(build_func) else None
        self.tmp_dir = tempfile.mkdtemp(prefix="kiln_autotvm_")
        self._pool: WorkerPool | None = None

    def build(self, measure_inputs: list) -> list[BuildResult]:
        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel)
        os.makedirs(self.tmp_dir, exist_ok=True)  # again after close()
        calls = [(build_candidate, (inp, self.tmp_dir, self.build_kwargs, self.build_func))
                 for inp in measure_inputs]
        results = []
        for (status, value) in self._pool.run(calls, self.timeout):
            if status == "ok":
                results.append(value)
            elif status == "timeout":
                results.append(BuildResult(None, None, f"build timed out after {value:g} s",
                                           value, MeasureErrorNo.BUILD_TIMEOUT))
            else:
                results.append(BuildResult(None, None, f"build worker failed: {value}", 0.0,
                                           MeasureErrorNo.COMPILE_HOST))
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


class _TimingRunner(Runner):
    """Shared settings of the local and RPC runners."""

    def __init__(self, timeout: float, n_parallel: int | None, number: int, repeat: int,
                 min_repeat_ms: float, cooldown_interval: float,
                 enable_cpu_cache_flush: bool) -> None:
        super().__init__(timeout, n_parallel)
        if number < 1 or repeat < 1:
            raise TVMError(f"runner number and repeat must be at least 1, got {number}, "
                           f"{repeat}")
        self.number, self.repeat = int(number), int(repeat)
        self.min_repeat_ms = float(min_repeat_ms)
        self.cooldown_interval = float(cooldown_interval)
        self.enable_cpu_cache_flush = bool(enable_cpu_cache_flush)

    def timing_args(self, build: BuildResult) -> tuple:
        return (build.filename, build.arg_info, self.number, self.repeat, self.min_repeat_ms,
                self.enable_cpu_cache_flush)


# seconds a device loader's worker may take beyond the run's own timeout (it kills the
# emulator itself at the timeout; killing the worker first would orphan the emulator)
_LOADER_GRACE = 30.0


def _loader_outcome(outcome: tuple[str, Any]) -> tuple[str, Any]:
    """A module loader's ``("ok", (status, value))`` as the run's own outcome."""
    status, value = outcome
    return value if status == "ok" else outcome


class LocalRunner(_TimingRunner):
    """Time candidates on this machine, one at a time, in a worker process of its own.

    With a ``module_loader`` (:class:`kiln.micro.AutoTvmModuleLoader`) each candidate is a
    device program the loader runs (on a QEMU Cortex-M) and measures itself.
    """

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, module_loader: Any = None) -> None:
        super().__init__(timeout, 1, number, repeat, min_repeat_ms, cooldown_interval,
                         enable_cpu_cache_flush)
        if module_loader is not None and not hasattr(module_loader, "measure"):
            raise TVMError(f"LocalRunner: module_loader {module_loader!r} has no measure("
                           "program, timeout) (use kiln.micro.AutoTvmModuleLoader)")
        self.module_loader = module_loader
        self._pool: WorkerPool | None = None

    def run(self, measure_inputs: list, build_results: list) -> list[MeasureResult]:
        if self._pool is None:
            self._pool = WorkerPool(1)
        outcomes = []
        for build in build_results:
            if build.error is not None:
                outcomes.append(("skip", None))
                continue
            # one call at a time: two candidates never time each other
            if self.module_loader is None:
                outcomes.append(self._pool.run([(time_candidate, self.timing_args(build))],
                                               self.timeout)[0])
                _remove(build.filename)
            else:
                call = (self.module_loader.measure, (build.filename, self.timeout))
                outcomes.append(_loader_outcome(
                    self._pool.run([call], self.timeout + _LOADER_GRACE)[0]))
                shutil.rmtree(os.path.dirname(build.filename), ignore_errors=True)
            if self.cooldown_interval > 0:
                time.sleep(self.cooldown_interval)
        return results_of_runs(build_results, outcomes)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _remove(path: str | None) -> None:
    if path:
        try:
            os.remove(path)
        except OSError:
            pass


class RPCRunner(_TimingRunner):
    """Time candidates on RPC servers of ``key`` registered with the tracker at
    ``host:port`` (one tracker session per candidate, as TVM does)."""

    def __init__(self, key: str, host: str, port: int, priority: int = 1, timeout: float = 10,
                 n_parallel: int | None = None, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, module_loader: Any = None) -> None:
        super().__init__(timeout, n_parallel, number, repeat, min_repeat_ms,
                         cooldown_interval, enable_cpu_cache_flush)
        self.key, self.host, self.port, self.priority = key, host, int(port), int(priority)

    def set_task(self, task: Any) -> None:
        from kiln import rpc

        super().set_task(task)
        tracker = rpc.connect_tracker(self.host, self.port)
        try:
            session = tracker.request(self.key, priority=100, session_timeout=self.timeout,
                                      max_retry=1, wait_timeout=10)
        except Exception as err:
            raise TVMError(f"RPCRunner: no free device with key {self.key!r} at tracker "
                           f"{self.host}:{self.port} ({err})") from err
        session.close()

    def run(self, measure_inputs: list, build_results: list) -> list[MeasureResult]:
        from kiln import rpc

        outcomes = []
        for build in build_results:
            if build.error is not None:
                outcomes.append(("skip", None))
                continue
            start = time.monotonic()
            try:
                session = rpc.connect_tracker(self.host, self.port).request(
                    self.key, priority=self.priority, session_timeout=self.timeout)
                try:
                    outcomes.append(("ok", time_candidate(*self.timing_args(build),
                                                          session=session)))
                finally:
                    session.close()
            except TVMError as err:
                elapsed = time.monotonic() - start
                status = "timeout" if elapsed >= self.timeout else "error"
                outcomes.append((status, self.timeout if status == "timeout" else
                                 str(err)[:1024]))
            _remove(build.filename)
            if self.cooldown_interval > 0:
                time.sleep(self.cooldown_interval)
        return results_of_runs(build_results, outcomes)
