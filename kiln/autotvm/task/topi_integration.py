"""TOPI templates: a compute taking ``cfg`` first and its schedule, registered as one task.

Entry points: :func:`register_topi_compute`, :func:`register_topi_schedule`,
:func:`get_workload`, :class:`TaskExtractEnv` (records the workloads a Relay compile asks
for, see :func:`kiln.autotvm.task.extract_from_program`).

``@register_topi_compute("dense_pack.x86")`` wraps ``f(cfg, *args)``: calling the wrapper
with ``args`` builds the workload, queries the current dispatch context for ``cfg`` and
stamps the workload on the output op (``op.attrs["workload"]``) so that
``@register_topi_schedule``'s wrapper finds the same config for ``schedule(outs)``.

Example
-------
>>> from kiln import autotvm, te
>>> @autotvm.register_topi_compute("doc_double")
... def double(cfg, a):
...     cfg.define_knob("unused", [0, 1])
...     return te.compute(a.shape, lambda i: a[i] * 2, name="d")
>>> @autotvm.register_topi_schedule("doc_double")
... def schedule_double(cfg, outs):
...     return te.create_schedule([o.op for o in outs])
>>> task = autotvm.task.create("doc_double", (te.placeholder((8,)),), "llvm")
>>> len(task.config_space), task.workload
(2, ('doc_double', ('TENSOR', (8,), 'float32')))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.autotvm.task.dispatcher import DispatchContext
from kiln.autotvm.task.task import TASK_TABLE, TaskTemplate, args_to_workload
from kiln.runtime.error import TVMError

__all__ = ["register_topi_compute", "register_topi_schedule", "get_workload", "TaskExtractEnv"]


class TaskExtractEnv:
    """While ``tracing``, every workload queried by a TOPI template or a Relay strategy is
    recorded (once) in ``tasks`` as ``(task_name, serialized args)``."""

    current: TaskExtractEnv | None = None

    def __init__(self, allow_duplicate: bool = False) -> None:
        self.tracing = False
        self.allow_duplicate = allow_duplicate
        self.wanted_relay_ops: list | None = None
        self.tasks: list[tuple[str, tuple]] = []

    def add_task(self, task_name: str, args: tuple) -> None:
        key = (task_name, args)
        if self.allow_duplicate or key not in self.tasks:
            self.tasks.append(key)

    def reset(self, wanted_relay_ops: list | None = None) -> None:
        self.wanted_relay_ops = wanted_relay_ops
        self.tasks = []

    def __enter__(self) -> TaskExtractEnv:
        self.tracing = True
        TaskExtractEnv.current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.tracing = False
        TaskExtractEnv.current = None

    @staticmethod
    def get(allow_duplicate: bool = False) -> TaskExtractEnv:
        """A new tracing environment (enter it with ``with``)."""
        return TaskExtractEnv(allow_duplicate)


def _current_target() -> Any:
    from kiln.target import Target

    return Target.current(allow_none=True)


def register_topi_compute(task_name: str, func: Callable | None = None) -> Callable:
    """Register ``func(cfg, *args)`` as the compute of TOPI template ``task_name``."""
    def decorate(f: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                raise TVMError(f"TOPI template {task_name!r}: keyword arguments are not "
                               "supported (they are not part of the workload)")
            workload = args_to_workload(args, task_name)
            env = TaskExtractEnv.current
            if env is not None and env.tracing:
                env.add_task(task_name, workload[1:])
            cfg = DispatchContext.current.query(_current_target(), workload)
            out = f(cfg, *args)
            outs = out if isinstance(out, list | tuple) else [out]
            for t in outs:
                t.op.attrs["workload"] = workload
            return out

        entry = TASK_TABLE.setdefault(task_name, TaskTemplate())
        if entry.fcompute is not None and entry.fcompute.__wrapped__ is not f:
            raise TVMError(f"TOPI compute {task_name!r} registered twice")
        wrapper.__wrapped__ = f
        wrapper.__module__ = f.__module__  # where a worker process finds the template
        wrapper.__name__ = getattr(f, "__name__", task_name)
        wrapper.__doc__ = f.__doc__
        entry.fcompute = wrapper
        return wrapper

    return decorate(func) if func is not None else decorate


def get_workload(outs: Any, task_name: str | None = None) -> tuple | None:
    """The workload stamped on an op reachable from ``outs`` (of ``task_name`` if given)."""
    outs = outs if isinstance(outs, list | tuple) else [outs]
    seen: set[int] = set()
    stack = [t.op for t in outs]
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        workload = getattr(op, "attrs", {}).get("workload")
        if workload is not None and (task_name is None or workload[0] == task_name):
            return workload
        stack.extend(t.op for t in getattr(op, "input_tensors", ()))
    return None


def register_topi_schedule(task_name: str, func: Callable | None = None) -> Callable:
    """Register ``func(cfg, outs)`` as the schedule of TOPI template ``task_name``."""
    def decorate(f: Callable) -> Callable:
        def wrapper(outs: Any, *args: Any) -> Any:
            workload = get_workload(outs, task_name)
            if workload is None:
                raise TVMError(f"schedule {task_name!r}: no output op carries a "
                               f"{task_name!r} workload (was it computed by its "
                               "register_topi_compute?)")
            cfg = DispatchContext.current.query(_current_target(), workload)
            return f(cfg, outs, *args)

        TASK_TABLE.setdefault(task_name, TaskTemplate()).fschedule = wrapper
        wrapper.__name__ = getattr(f, "__name__", task_name)
        wrapper.__doc__ = f.__doc__
        return wrapper

    return decorate(func) if func is not None else decorate
