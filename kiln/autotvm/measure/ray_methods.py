"""Builds and measurements on Ray actors: tuning scaled out over a Ray cluster.

Entry points: :class:`RayBuilder`, :class:`RayRunner` (``address=None`` for the Ray this
process already joined or a new local one, ``"auto"``, ``"ray://head:10001"`` for a remote
cluster).

Candidates are built by ``n_parallel`` one-CPU *build actors*, started once per builder and
reused for every batch (tasks' idle workers may be reaped by Ray between batches, and each
restart re-imports kiln). The library's bytes stay in Ray's object store and go straight to
the timer, wherever it runs (no shared file system needed). Timing is done by one *timer
actor per node*, which runs one candidate at a time: two candidates never time each other on
a node, candidates on different nodes are timed in parallel, and a tuner's builds never
overlap its timings (it builds a batch, then times it). On nodes that offer the custom
resource ``autotvm_timer`` (``ray start --resources='{"autotvm_timer": 1}'``) the timer holds
it, so cluster users can keep other work off those nodes. An actor that dies (its process or
its node) is restarted once and its call retried; a candidate that fails twice is recorded as
failed (``COMPILE_HOST`` / ``RUNTIME_DEVICE``) and tuning goes on. Timeouts count on the
worker (``BUILD_TIMEOUT`` / ``RUN_TIMEOUT``); an actor stuck in native code past a safety
deadline is killed and restarted.

The timer is an actor rather than tasks holding a node's CPUs: on a small node, tasks of
different CPU shapes make Ray restart workers between the build and timing phases (measured:
builds 4x slower on 2 cores).

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
    LocalBuilder,
    LocalRunner,
    build_candidate,
    results_of_runs,
    time_candidate,
)
from kiln.runtime.error import TVMError

__all__ = ["RayBuilder", "RayRunner", "TIMER_RESOURCE", "build_to_bytes", "time_from_bytes",
           "on_ray", "cluster_address"]

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


def _gather(ray: Any, refs: list, timeout: float,
            actors: list | None = None) -> list[tuple[str, Any]]:
    """``(status, value)`` per ref: the task's own (ok, or timeout counted on its worker),
    error (it failed after Ray's retry), or timeout when the driver's safety deadline
    ``timeout`` passed (a call stuck in native code: its actor, ``actors[k]`` for
    ``refs[k]``, is killed and restarts)."""
    owner = {id(r): a for r, a in zip(refs, actors or [None] * len(refs))}
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
            if owner[id(ref)] is not None:  # Ray cannot force-cancel an actor's call
                ray.kill(owner[id(ref)], no_restart=False)
            else:
                ray.cancel(ref, force=True)
            outcome[id(ref)] = ("timeout", timeout)
            pending.remove(ref)
    return [outcome[id(r)] for r in refs]


class _BuildWorker:
    """A Ray actor that builds candidates, one at a time, on one CPU. Actors rather than
    tasks: a task's worker that sits idle while a batch is timed may be reaped by Ray and
    restarted (re-importing kiln, seconds) for the next batch; an actor's stays."""

    def build(self, measure_input: Any, build_kwargs: dict,
              timeout: float) -> tuple[tuple[str, Any], bytes]:
        return build_to_bytes(measure_input, build_kwargs, timeout)


class RayBuilder(Builder):
    """Build candidates on ``n_parallel`` one-CPU Ray actors (default: the cluster's CPU
    count), started once and reused for every batch."""

    def __init__(self, address: str | None = None, timeout: float = 10,
                 n_parallel: int | None = None, build_kwargs: dict | None = None) -> None:
        self.ray = _connect(address)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        super().__init__(timeout, n_parallel or cpus, build_kwargs)
        self.workers: list = []
        self._start_workers()

    def _start_workers(self) -> None:
        # a worker (or its node) that dies is restarted and its call retried once
        cls = self.ray.remote(_BuildWorker).options(
            num_cpus=1, max_restarts=_RETRIES, max_task_retries=_RETRIES,
            runtime_env=_runtime_env())
        self.workers = [cls.remote() for _ in range(self.n_parallel)]
        # warm: the first candidates' timeouts and the throughput do not pay for start-up
        self.ray.get([w.__ray_ready__.remote() for w in self.workers])

    def build(self, measure_inputs: list) -> list[BuildResult]:
        if not self.workers:
            self._start_workers()
        actors = [self.workers[k % len(self.workers)] for k in range(len(measure_inputs))]
        pairs = [a.build.options(num_returns=2).remote(inp, self.build_kwargs, self.timeout)
                 for a, inp in zip(actors, measure_inputs)]
        # a worker's candidates run in turn: the safety deadline covers its whole queue
        queue = -(-len(pairs) // max(1, len(self.workers)))
        outcomes = _gather(self.ray, [meta for meta, _ in pairs],
                           (_SAFETY * self.timeout + _STARTUP) * queue, actors)
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

    def close(self) -> None:
        """Stop the build actors; :meth:`build` starts new ones if used again."""
        for worker in self.workers:
            self.ray.kill(worker)
        self.workers = []


class _Timer:
    """A Ray actor that times candidates on its node, one at a time (an actor runs one
    method call at a time, so two candidates never time each other there)."""

    def time(self, timing_function: Any, *args: Any) -> tuple[str, Any]:
        return timing_function(*args)


class RayRunner(Runner):
    """Time candidates on one timing actor per Ray node (candidates on different nodes are
    timed in parallel, never two on one node)."""

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
        # what a timer runs per candidate: ``f(blob, arg_info, number, repeat, min_repeat_ms,
        # flush, timeout) -> (status, costs)``
        self.timing_function = time_from_bytes
        self.timers: list = []
        self._start_timers()

    def _start_timers(self) -> None:
        """One warmed-up timer per live node (their start is not the candidates' time)."""
        self.timers = [self._timer(node) for node in self.ray.nodes() if node.get("Alive")]
        self.ray.get([t.time.remote(_warm_up_timer) for t in self.timers])

    def close(self) -> None:
        """Stop the timer actors (each holds a worker process); :meth:`run` starts new
        ones if the runner is used again."""
        for timer in self.timers:
            self.ray.kill(timer)
        self.timers = []

    def _timer(self, node: dict) -> Any:
        """A timing actor placed on ``node`` (elsewhere if it dies: restarted once, its
        call retried once)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        resources = {TIMER_RESOURCE: 1} if node["Resources"].get(TIMER_RESOURCE) else {}
        return self.ray.remote(_Timer).options(
            num_cpus=0, resources=resources, max_restarts=_RETRIES,
            max_task_retries=_RETRIES, runtime_env=_runtime_env(),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=True)
        ).remote()

    def run(self, measure_inputs: list, build_results: list) -> list:
        if not self.timers:
            self._start_timers()
        outcomes: list[tuple[str, Any]] = [("skip", None)] * len(build_results)
        submitted = [(k, b) for k, b in enumerate(build_results) if b.error is None]
        refs = [self.timers[n % len(self.timers)].time.remote(
                    self.timing_function, b.filename, b.arg_info, self.number, self.repeat,
                    self.min_repeat_ms, self.enable_cpu_cache_flush, self.timeout)
                for n, (_, b) in enumerate(submitted)]
        # a timer's candidates run in turn: the safety deadline covers its whole queue
        queue = -(-len(refs) // max(1, len(self.timers)))
        safety = (_SAFETY * self.timeout + _STARTUP) * max(1, queue)
        owners = [self.timers[n % len(self.timers)] for n in range(len(refs))]
        for (k, _), outcome in zip(submitted, _gather(self.ray, refs, safety, owners)):
            outcomes[k] = outcome
        if self.cooldown_interval > 0:
            time.sleep(self.cooldown_interval)
        return results_of_runs(build_results, outcomes)


def _warm_up_timer() -> tuple[str, Any]:
    import kiln.autotvm  # noqa: F401  (the first candidate should not pay for the import)

    return "ok", None


def cluster_address(cluster: str) -> str | None:
    """The ``ray.init`` address of ``measure_option``'s ``cluster``: ``"ray"`` -> None,
    ``"ray://HOST:PORT"`` as is, ``"ray:ADDRESS"`` -> ``ADDRESS``."""
    if cluster == "ray":
        return None
    if isinstance(cluster, str) and cluster.startswith("ray://"):
        return cluster
    if isinstance(cluster, str) and cluster.startswith("ray:") and cluster[4:]:
        return cluster[4:]
    raise TVMError(f"measure_option: cluster must be 'ray', 'ray://HOST:PORT' or "
                   f"'ray:ADDRESS' (e.g. 'ray:auto', 'ray:HEAD:6379'), got {cluster!r}")


def on_ray(builder: Builder, runner: Runner, cluster: str) -> tuple[Builder, Runner]:
    """``builder`` and ``runner`` moved onto the Ray cluster ``cluster`` (see
    ``measure_option``): local ones become Ray ones with the same settings (the builder's
    parallelism becomes the cluster's CPU count); Ray ones stay."""
    address = cluster_address(cluster)
    # both checked before joining the cluster: a wrong argument fails fast
    if type(builder) is not LocalBuilder and not isinstance(builder, RayBuilder):
        raise TVMError(f"measure_option: cluster={cluster!r} moves a LocalBuilder onto Ray; "
                       f"got {type(builder).__name__}")
    if type(runner) is not LocalRunner and not isinstance(runner, RayRunner):
        raise TVMError(f"measure_option: cluster={cluster!r} moves a LocalRunner onto Ray; "
                       f"got {type(runner).__name__} (it measures elsewhere)")
    if getattr(builder, "build_func", None) is not None or \
            getattr(runner, "module_loader", None) is not None:
        raise TVMError(f"measure_option: cluster={cluster!r} cannot move a device build_func "
                       "or module_loader (e.g. kiln.micro's QEMU measurement) onto Ray; "
                       "measure on this machine")
    if type(builder) is LocalBuilder:
        builder.close()  # its scratch folder: nothing is built locally
        builder = RayBuilder(address, timeout=builder.timeout,
                             build_kwargs=builder.user_build_kwargs)
    if type(runner) is LocalRunner:
        runner = RayRunner(address, timeout=runner.timeout, number=runner.number,
                           repeat=runner.repeat, min_repeat_ms=runner.min_repeat_ms,
                           cooldown_interval=runner.cooldown_interval,
                           enable_cpu_cache_flush=runner.enable_cpu_cache_flush)
    return builder, runner
