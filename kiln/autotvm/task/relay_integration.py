"""AutoTVM and Relay: tuned configs in ``relay.build``/``relay.vm.compile``, and task extraction.

Entry points: :func:`extract_from_program`, :func:`extract_from_multiple_program`, and
:func:`relay_config` (registered with the op strategy registry on import, so that the
implementation Relay selects for a call runs with the config the current dispatch context
holds for its workload).

Untuned (the root fallback context), Relay keeps its default implementation and knobs, so
importing AutoTVM changes nothing. Under ``apply_history_best(log)`` each tunable
implementation's workload is looked up; among those with records the lowest measured cost
wins (TVM's ``select_implementation``), and its knobs reach both its compute and schedule.

"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from kiln.autotvm.task.dispatcher import DispatchContext, FallbackContext
from kiln.autotvm.task.task import Task, create, deserialize_args
from kiln.autotvm.task.topi_integration import TaskExtractEnv
from kiln.autotvm.topi_x86 import KNOBS, RELAY_TASKS, relay_task_specs
from kiln.relay.op.strategy.registry import (
    IMPLEMENTATIONS_OF,
    register_config_provider,
    register_tuning_probe,
)
from kiln.runtime.error import TVMError

__all__ = ["extract_from_program", "extract_from_multiple_program", "relay_config"]

logger = logging.getLogger("autotvm")


def relay_config(impl_name: str, attrs: Any, inputs: list, out_type: Any,
                 target: Any) -> tuple[float, dict] | None:
    """``(cost, knobs)`` of the tuned config of a Relay call's implementation, or None
    (not tunable, symbolic shapes, or no record)."""
    if impl_name not in RELAY_TASKS:
        return None
    env = TaskExtractEnv.current
    tracing = env is not None and env.tracing
    if not tracing and isinstance(DispatchContext.current, FallbackContext):
        return None  # nothing tuned: the default schedule, no per-workload warnings
    specs = relay_task_specs(impl_name, attrs, inputs, out_type)
    if not specs:
        return None
    if tracing:
        wanted = env.wanted_relay_ops
        if wanted is None or impl_name in wanted:
            env.add_task(*specs[0])
        return None
    from kiln.target import Target

    target = Target(target) if isinstance(target, str) else target
    for task_name, args in specs:
        cfg = DispatchContext.current.query(target, (task_name, *args))
        if cfg is not None and not cfg.is_fallback and _in_space(task_name, args, target, cfg):
            return (cfg.cost if cfg.cost is not None else 0.0), KNOBS[task_name](cfg)
    return None


@functools.lru_cache(maxsize=1024)
def _space_of(task_name: str, args: tuple, target: str) -> Any:
    return create(task_name, deserialize_args(args), target).config_space


_REJECTED: set[tuple] = set()


def _in_space(task_name: str, args: tuple, target: Any, cfg: Any) -> bool:
    """Whether a record's config sets every knob of kiln's space for this workload to one of
    its values (a log from another template version, or TVM's, may use other knobs or
    sizes: such a record is ignored with one warning rather than building a schedule the
    template never offered). Knobs kiln's template lacks are ignored."""
    space = _space_of(task_name, args, str(target))
    names = {name for name, _, _ in cfg.to_json_dict()["entity"]}
    ok = all(name in names and cfg[name] in knob.entities
             for name, knob in space.space_map.items())
    if not ok and (task_name, args) not in _REJECTED:
        _REJECTED.add((task_name, args))
        logger.warning("ignoring the tuning record of %s: its config %s is not in kiln's "
                       "space for this workload", (task_name, *args), cfg)
    return ok


register_config_provider(relay_config)


@register_tuning_probe
def _records_in_effect() -> bool:
    """Whether relay_config may answer now: tuning records applied, or tasks being traced."""
    env = TaskExtractEnv.current
    return (env is not None and env.tracing) or not isinstance(DispatchContext.current,
                                                                FallbackContext)


def _lower_primitives(mod: Any, target: Any, params: dict | None) -> None:
    """Optimize ``mod`` as relay.build does (without AlterOpLayout, so tasks keep the
    shapes of the model's own calls) and lower each fused function once."""
    from kiln.ir.transform import PassContext
    from kiln.relay import expr as rx
    from kiln.relay.backend.te_compiler import TECompiler
    from kiln.relay.build_module import optimize
    from kiln.relay.expr_functor import post_order_visit

    with PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]), target:
        optimized = optimize(mod, target, params)
        compiler = TECompiler(target)
        primitives: list = []

        def collect(node: Any) -> None:
            if isinstance(node, rx.Function) and node.get_attr("Primitive"):
                primitives.append(node)

        for gvar in optimized.get_global_vars():
            func = optimized[gvar]
            if isinstance(func, rx.Function):
                post_order_visit(func, collect)
        for func in primitives:
            compiler.lower(func)


def extract_from_multiple_program(mods: list, params: list, target: Any,
                                  target_host: Any = None, ops: list | None = None) -> list:
    """Tasks of several modules, one per distinct workload (in first-seen order)."""
    from kiln.ir.module import IRModule
    from kiln.target import Target

    target = Target(target) if isinstance(target, str) else target
    wanted = None
    if ops is not None:
        names = [op if isinstance(op, str) else op.name for op in ops]
        wanted = {impl for name in names for impl in IMPLEMENTATIONS_OF.get(name, ())}
    env = TaskExtractEnv.get()
    env.reset(wanted)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with env:
                for mod, param in zip(mods, params):
                    if not isinstance(mod, IRModule):
                        mod = IRModule.from_expr(mod)
                    _lower_primitives(mod, target, param)
        except BaseException as err:  # re-raised in the caller's thread
            errors.append(err)

    # a thread of its own, as TVM does: extraction must not leave state in the caller's
    # target or pass context stacks if it fails half way
    thread = threading.Thread(target=run, name="autotvm-extract")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    tasks: list[Task] = []
    for task_name, args in env.tasks:
        try:
            tasks.append(create(task_name, deserialize_args(args), target, target_host))
        except TVMError as err:
            raise TVMError(f"extract_from_program: cannot create task {task_name} {args}: "
                           f"{err}") from err
    return tasks


def extract_from_program(mod: Any, params: dict | None, target: Any, target_host: Any = None,
                         ops: list | None = None) -> list:
    """The tuning tasks of a Relay program: one per distinct workload of a tunable
    implementation (every valid implementation of a call is a task, as in TVM).

    ``ops`` (e.g. ``[relay.op.get("nn.conv2d")]``) keeps only those ops' tasks.
    """
    return extract_from_multiple_program([mod], [params], target, target_host, ops)
