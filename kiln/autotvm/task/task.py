"""Tuning tasks and templates: what AutoTVM tunes and how it instantiates one config.

Entry points: :func:`template` (``@autotvm.template("name")``), :func:`create`
(``autotvm.task.create(name, args, target)``), :class:`Task`, :data:`TASK_TABLE`,
:func:`get_config`, :func:`serialize_args` / :func:`deserialize_args`,
:func:`args_to_workload`, :func:`compute_flop`.

A workload is ``(task_name,) + serialize_args(args)``: a tensor becomes
``("TENSOR", shape, dtype)``, lists become tuples, constants their value — the key records and
dispatch contexts use. A template is a function of the workload's arguments returning
``(schedule, arg_bufs)``; it reads its knobs with :func:`get_config`.

Example
-------
>>> from kiln import autotvm, te
>>> @autotvm.template("doc_scale")
... def scale(n, dtype):
...     a = te.placeholder((n,), dtype, name="a")
...     b = te.compute((n,), lambda i: a[i] * 2, name="b")
...     s = te.create_schedule(b.op)
...     cfg = autotvm.get_config()
...     cfg.define_split("tile", n, num_outputs=2)
...     cfg["tile"].apply(s, b, b.op.axis[0])
...     return s, [a, b]
>>> task = autotvm.task.create("doc_scale", (64, "float32"), "llvm")
>>> len(task.config_space), task.flop, task.workload
(7, 64.0, ('doc_scale', 64, 'float32'))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kiln.autotvm.task.dispatcher import ApplyConfig, DispatchContext
from kiln.autotvm.task.space import ConfigSpace, InstantiationError
from kiln.runtime.error import TVMError

__all__ = ["Task", "TaskTemplate", "TASK_TABLE", "DEFAULT_CONFIG_INDEX",
           "default_config_index", "template", "create", "get_config",
           "serialize_args", "deserialize_args", "args_to_workload", "compute_flop",
           "MissingTask"]


class TaskTemplate:
    """A registered template: a custom function, or a TOPI compute + schedule pair."""

    def __init__(self) -> None:
        self.fcompute: Callable | None = None
        self.fschedule: Callable | None = None
        self.fcustomized: Callable | None = None

    def __call__(self, *args: Any) -> tuple[Any, list]:
        """``(schedule, arg_bufs)`` for workload arguments (tensors as ``"TENSOR"`` specs)."""
        if self.fcustomized is not None:
            return self.fcustomized(*deserialize_args(args))
        if self.fcompute is None or self.fschedule is None:
            raise TVMError("a TOPI template needs both register_topi_compute and "
                           "register_topi_schedule")
        out = self.fcompute(*deserialize_args(args))
        outs = list(out) if isinstance(out, list | tuple) else [out]
        sch = self.fschedule(outs)
        return sch, _placeholders(outs) + outs


def _placeholders(outs: list) -> list:
    """The placeholder tensors ``outs`` read, in first-visit order."""
    seen: dict[int, Any] = {}
    found: list = []

    def visit(tensor: Any) -> None:
        op = tensor.op
        if id(op) in seen:
            return
        seen[id(op)] = op
        if type(op).__name__ == "PlaceholderOp":
            found.append(op.output(0))
        for t in getattr(op, "input_tensors", ()):
            visit(t)

    for out in outs:
        visit(out)
    return found


# task name -> its template
TASK_TABLE: dict[str, TaskTemplate] = {}
# task name -> ``f(task) -> index`` of the config equal to the untuned schedule (or None)
DEFAULT_CONFIG_INDEX: dict[str, Callable] = {}


def default_config_index(task: Task) -> int | None:
    """The index of the config that reproduces the template's untuned schedule, when the
    template knows it; tuners measure it first, so tuning starts from the default."""
    find = DEFAULT_CONFIG_INDEX.get(task.name)
    return None if find is None or task.config_space is None else find(task)


def _serialize(x: Any) -> Any:
    from kiln import te
    from kiln.tir.expr import FloatImm, IntImm, StringImm

    if isinstance(x, te.Tensor):
        return ("TENSOR", tuple(_serialize(d) for d in x.shape), str(x.dtype))
    if isinstance(x, list | tuple):
        return tuple(_serialize(v) for v in x)
    if isinstance(x, IntImm | FloatImm | StringImm):
        return x.value
    if x is None or isinstance(x, int | float | str | bool):
        return x
    if hasattr(x, "name_hint") or type(x).__name__ == "Any":
        return x  # a symbolic dimension stays itself (such workloads are not tuned)
    raise TVMError(f"cannot put {type(x).__name__} {x!r} in an AutoTVM workload")


def serialize_args(args: Any) -> tuple:
    """Workload form of template arguments (tensors as ``("TENSOR", shape, dtype)``)."""
    return tuple(_serialize(a) for a in args)


def deserialize_args(args: Any) -> list:
    """Template arguments of a workload: ``("TENSOR", ...)`` becomes a placeholder."""
    from kiln import te

    out = []
    for arg in args:
        if isinstance(arg, tuple | list) and len(arg) == 3 and arg[0] == "TENSOR":
            out.append(te.placeholder(tuple(arg[1]), arg[2]))
        else:
            out.append(arg)
    return out


def args_to_workload(args: Any, task_name: str | None = None) -> tuple:
    """``(task_name,) + serialize_args(args)``."""
    head = (task_name,) if task_name is not None else ()
    return head + serialize_args(args)


def get_config() -> Any:
    """The config of the template being instantiated (inside a template function)."""
    from kiln.target import Target

    return DispatchContext.current.query(Target.current(allow_none=True), None)


def template(task_name: str, func: Callable | None = None) -> Callable:
    """Register a template ``func(*args) -> (schedule, arg_bufs)`` under ``task_name``.

    Called outside tuning, the decorated function looks its config up in the current
    dispatch context (tuned records or the fallback), then runs the template with it.
    """
    def decorate(f: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                raise TVMError(f"template {task_name!r} takes positional arguments only")
            from kiln.target import Target

            workload = args_to_workload(args, task_name)
            cfg = DispatchContext.current.query(Target.current(allow_none=True), workload)
            with ApplyConfig(cfg):
                return f(*args)

        entry = TASK_TABLE.setdefault(task_name, TaskTemplate())
        entry.fcustomized = f
        wrapper.__name__ = getattr(f, "__name__", task_name)
        wrapper.__doc__ = f.__doc__
        return wrapper

    return decorate(func) if func is not None else decorate


class MissingTask(TaskTemplate):
    """Stands for a template whose module was not imported where a record was read."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __call__(self, *args: Any) -> Any:
        raise TVMError(f"AutoTVM template {self.name!r} is not registered; import the module "
                       "that defines it (kiln.autotvm registers kiln's x86 templates)")


class Task:
    """A tuning task: a template name and its arguments, with the config space, FLOPs and
    target filled in by :func:`create`."""

    def __init__(self, name: str, args: Any) -> None:
        self.name = name
        self.args = serialize_args(args)  # the workload form, as TVM keeps them
        self.kwargs: dict = {}
        self.config_space: ConfigSpace | None = None
        self.func = TASK_TABLE.get(name, MissingTask(name))
        self.flop: float | None = None
        self.target = None
        self.target_host = None

    @property
    def workload(self) -> tuple:
        return args_to_workload(self.args, self.name)

    def instantiate(self, config: Any) -> tuple[Any, list]:
        """``(schedule, arg_bufs)`` of the template under ``config``."""
        config.flop = 0
        with ApplyConfig(config), _target_scope(self.target):
            sch, arg_bufs = self.func(*self.args)
        if not config.valid():
            raise InstantiationError("; ".join(config.errors))
        return sch, arg_bufs

    def __getstate__(self) -> dict:
        # The template is found again by name in the receiving process, after importing the
        # module that registers it. The space is not sent (its filters may be lambdas):
        # workers instantiate configs, they do not enumerate the space.
        func = self.func.fcustomized or self.func.fcompute
        return {"name": self.name, "args": self.args, "flop": self.flop,
                "module": getattr(func, "__module__", None),
                "target": None if self.target is None else str(self.target),
                "target_host": None if self.target_host is None else str(self.target_host)}

    def __setstate__(self, state: dict) -> None:
        import importlib

        from kiln.target import Target

        if state["name"] not in TASK_TABLE and state["module"] not in (None, "__main__"):
            importlib.import_module(state["module"])
        self.__init__(state["name"], state["args"])
        self.flop = state["flop"]
        self.target = None if state["target"] is None else Target(state["target"])
        self.target_host = None if state["target_host"] is None else Target(
            state["target_host"])

    def __repr__(self) -> str:
        return f"Task(func_name={self.name}, args={self.args}, kwargs={{}}, " \
               f"workload={self.workload})"


class _NullScope:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _target_scope(target: Any) -> Any:
    return target if target is not None else _NullScope()


def create(task_name: str, args: Any, target: Any, target_host: Any = None) -> Task:
    """A task for template ``task_name`` on ``args``: its config space collected by one
    instantiation, and its FLOP count (the template's ``add_flop`` or counted)."""
    from kiln.target import Target

    if task_name not in TASK_TABLE:
        raise TVMError(f"no AutoTVM template named {task_name!r}; registered: "
                       f"{sorted(TASK_TABLE)}")
    target = Target(target) if isinstance(target, str) else target
    task = Task(task_name, args)
    task.target = target
    task.target_host = Target(target_host) if isinstance(target_host, str) else target_host
    space = ConfigSpace()
    with ApplyConfig(space), _target_scope(target):
        sch, arg_bufs = task.func(*task.args)
    task.config_space = space
    task.flop = space.flop or compute_flop(sch)
    return task


def _expr_flop(node: Any) -> int:
    """Arithmetic operations in one evaluation of ``node`` (loads' index math excluded)."""
    from kiln.tir import expr as e

    if isinstance(node, e.ProducerLoad | e.BufferLoad):
        return 0
    if isinstance(node, e.Reduce):
        return 1 + sum(_expr_flop(s) for s in node.source)
    count = 1 if isinstance(node, e.BinaryOpExpr | e.Call | e.Select) else 0
    for name in getattr(type(node), "_fields", {}):
        value = getattr(node, name, None)
        children = value if isinstance(value, list | tuple) else [value]
        count += sum(_expr_flop(c) for c in children if isinstance(c, e.PrimExpr))
    return count


def compute_flop(sch: Any) -> float:
    """Operations of every compute stage of ``sch`` times its loop extents (TVM's count)."""
    total = 0
    for stage in sch.stages:
        op = stage.op
        body = getattr(op, "body", None)
        if body is None:
            continue
        extents = [iv.dom.extent for iv in [*op.axis, *op.reduce_axis]]
        if not all(hasattr(x, "value") for x in extents):
            raise TVMError("compute_flop needs constant loop extents")
        total += math.prod(x.value for x in extents) * sum(_expr_flop(b) for b in body)
    if total == 0:
        raise TVMError("Cannot find float number operation in this operator. "
                       "Please use `cfg.add_flop` to manually set FLOP for this operator")
    return float(total)
