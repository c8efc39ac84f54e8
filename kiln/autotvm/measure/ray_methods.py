"""Builds and measurements as Ray tasks: tuning scaled out over a Ray cluster.

Entry points: :class:`RayBuilder`, :class:`RayRunner` (``address=None`` for the Ray this
process already joined or a new local one, ``"auto"``, ``"ray://head:10001"`` for a remote
cluster).

Each candidate is built by a one-CPU Ray task; the library's bytes stay in Ray's object store
and go straight to the timing task, wherever Ray places it (no shared file system needed).
A timing task holds a *whole node* (all its CPUs) — or, on clusters whose nodes offer the
custom resource ``autotvm_timer`` (``ray start --resources='{"autotvm_timer": 1}'``), that
resource — so two candidates never time each other and no build shares the cores being
timed. A task whose worker or node dies is retried once by Ray on another worker; if it
fails again the candidate is recorded as failed (``RUNTIME_DEVICE`` or ``COMPILE_HOST``) and
tuning goes on. A task past its timeout is cancelled (``BUILD_TIMEOUT`` / ``RUN_TIMEOUT``).

Setup steps for a multi-node cluster are in ``docs/autotvm.md``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kiln.autotvm.measure.measure import Builder, BuildResult, MeasureErrorNo, Runner
from kiln.autotvm.measure.measure_methods import (
    build_candidate,
    results_of_runs,
    time_candidate,
)
from kiln.runtime.error import TVMError

__all__ = ["RayBuilder", "RayRunner", "TIMER_RESOURCE", "build_to_bytes", "time_from_bytes"]

# the custom resource a node may offer to run one timing at a time while building elsewhere
TIMER_RESOURCE = "autotvm_timer"
# the driver's deadline for a task: its own timeout (counted on the worker) times this, plus
# seconds for starting a worker (a Ray worker imports kiln when it starts)
_SAFETY, _STARTUP = 2.0, 60.0
# a retried system failure (lost worker or node) counts once more; then the candidate fails
_RETRIES = 1


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TVMError("RayBuilder/RayRunner need ray: pip install 'kiln[tune]'") from None
    return ray


def _connect(address: str | None) -> Any:
    """Join the cluster at ``address`` (or the one this process joined, or a new local one)."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, ignore_reinit_error=True,
                 log_to_driver=False)
    return ray


def _runtime_env() -> dict:
    """Let workers on this machine import the kiln this driver runs (a source checkout
    included) and the modules defining its templates: the driver's ``sys.path``. Paths
    missing on other nodes are skipped by Python there."""
    import kiln

    root = str(Path(kiln.__file__).resolve().parent.parent)
    paths = dict.fromkeys(p for p in [root, *sys.path] if p and os.path.isdir(p))
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


class _Timeout(Exception):
    pass


def _alarm(seconds: float) -> None:
    """Raise :class:`_Timeout` in this (worker) thread after ``seconds``; 0 disarms.

    The timeout counts from when the task starts on its worker, not from submission: a
    queued task or a worker that is still starting is not the candidate's fault.
    """
    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def build_to_bytes(measure_input: Any, build_kwargs: dict,
                    timeout: float) -> tuple[tuple[str, Any], bytes]:
    """Build one candidate on a Ray worker: ``((status, BuildResult), library bytes)``."""
    _alarm(timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="kiln_autotvm_ray_") as tmp:
            result = build_candidate(measure_input, tmp, build_kwargs)
            if result.error is not None:
                return ("ok", result), b""
            blob = Path(result.filename).read_bytes()
    except _Timeout:
        return ("timeout", timeout), b""
    finally:
        _alarm(0)
    return ("ok", result._replace(filename=None)), blob


def time_from_bytes(blob: bytes, arg_info: list, number: int, repeat: int,
                     min_repeat_ms: float, flush: bool, timeout: float) -> tuple[str, Any]:
    """Time a candidate's library (given as bytes) on a Ray worker: ``(status, costs)``."""
    _alarm(timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="kiln_autotvm_ray_") as tmp:
            path = os.path.join(tmp, "candidate.so")
            Path(path).write_bytes(blob)
            return "ok", time_candidate(path, arg_info, number, repeat, min_repeat_ms, flush)
    except _Timeout:
        return "timeout", timeout
    finally:
        _alarm(0)


def _gather(ray: Any, refs: list, timeout: float) -> list[tuple[str, Any]]:
    """``(status, value)`` per ref: the task's own (ok, or timeout counted on its worker),
    error (it failed after Ray's retry), or timeout when the driver's safety deadline
    ``timeout`` passed (a task stuck in native code: it is cancelled)."""
    deadline = {id(r): time.monotonic() + timeout for r in refs}
    outcome: dict[int, tuple[str, Any]] = {}
    pending = list(refs)
    while pending:
        wait_for = max(0.0, min(deadline[id(r)] for r in pending) - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=wait_for)
        for ref in ready:
            try:
                outcome[id(ref)] = ray.get(ref)  # the task's own (status, value)
            except Exception as err:  # a crash, a lost node, or the task's own exception
                outcome[id(ref)] = ("error", f"{type(err).__name__}: {err}"[:1024])
        now = time.monotonic()
        for ref in [r for r in pending if now >= deadline[id(r)]]:
            ray.cancel(ref, force=True)
            outcome[id(ref)] = ("timeout", timeout)
            pending.remove(ref)
    return [outcome[id(r)] for r in refs]


class RayBuilder(Builder):
    """Build candidates as one-CPU Ray tasks (``n_parallel`` per batch, default: the
    cluster's CPU count)."""

    def __init__(self, address: str | None = None, timeout: float = 10,
                 n_parallel: int | None = None, build_kwargs: dict | None = None) -> None:
        self.ray = _connect(address)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        super().__init__(timeout, n_parallel or cpus, build_kwargs)
        self._remote = self.ray.remote(build_to_bytes).options(
            num_cpus=1, num_returns=2, max_retries=_RETRIES, runtime_env=_runtime_env())

    def build(self, measure_inputs: list) -> list[BuildResult]:
        pairs = [self._remote.remote(inp, self.build_kwargs, self.timeout)
                 for inp in measure_inputs]
        outcomes = _gather(self.ray, [meta for meta, _ in pairs], _SAFETY * self.timeout +
                           _STARTUP * len(pairs))
        results = []
        for (status, value), (_, blob) in zip(outcomes, pairs):
            if status == "ok":
                # the bytes stay in the object store: the runner's task reads them there
                results.append(value if value.error is not None else value._replace(
                    filename=blob))
            elif status == "timeout":
                results.append(BuildResult(None, None, f"build timed out after {value:g} s",
                                           value, MeasureErrorNo.BUILD_TIMEOUT))
            else:
                results.append(BuildResult(None, None, f"build task failed twice: {value}",
                                           0.0, MeasureErrorNo.COMPILE_HOST))
        return results


class RayRunner(Runner):
    """Time candidates as Ray tasks, each holding a whole node (or an ``autotvm_timer``)."""

    def __init__(self, address: str | None = None, timeout: float = 10, number: int = 4,
                 repeat: int = 3, min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False) -> None:
        super().__init__(timeout, 1)
        if number < 1 or repeat < 1:
            raise TVMError(f"runner number and repeat must be at least 1, got {number}, "
                           f"{repeat}")
        self.ray = _connect(address)
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), min_repeat_ms
        self.cooldown_interval = float(cooldown_interval)
        self.enable_cpu_cache_flush = bool(enable_cpu_cache_flush)
        # the Ray task timing one candidate (``task_options()`` are its resources and retries)
        self.timing_task = self.ray.remote(time_from_bytes).options(**self.task_options())

    def task_options(self) -> dict:
        """Ray options of a timing task: its pinning, one retry, the driver's import path."""
        return {"max_retries": _RETRIES, "runtime_env": _runtime_env(), **self.pinning()}

    def pinning(self) -> dict:
        """Ray resources of one timing task: an ``autotvm_timer`` where nodes offer one,
        else all the CPUs of the largest node."""
        if self.ray.cluster_resources().get(TIMER_RESOURCE):
            return {"num_cpus": 1, "resources": {TIMER_RESOURCE: 1}}
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        cpus = max((n["Resources"].get("CPU", 1) for n in nodes), default=1)
        return {"num_cpus": cpus}

    def run(self, measure_inputs: list, build_results: list) -> list:
        outcomes: list[tuple[str, Any]] = [("skip", None)] * len(build_results)
        submitted = [(k, b) for k, b in enumerate(build_results) if b.error is None]
        # one at a time per node is Ray's job (the resources above); submit them all
        refs = [self.timing_task.remote(b.filename, b.arg_info, self.number, self.repeat,
                                        self.min_repeat_ms, self.enable_cpu_cache_flush,
                                        self.timeout)
                for _, b in submitted]
        # the tasks take the node in turn: the safety deadline covers them all
        safety = (_SAFETY * self.timeout + _STARTUP) * max(1, len(refs))
        for (k, _), outcome in zip(submitted, _gather(self.ray, refs, safety)):
            outcomes[k] = outcome
        if self.cooldown_interval > 0:
            time.sleep(self.cooldown_interval)
        return results_of_runs(build_results, outcomes)
