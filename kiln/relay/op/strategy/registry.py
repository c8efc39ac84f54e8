"""Op strategies: which compute + schedule pairs implement an op on a target (TVM's design).

Entry points: :class:`OpImplementation`, :class:`OpStrategy`, :func:`register_strategy`,
:func:`strategy_for`, :func:`select_implementation`, :func:`register_tuned_selector`,
:func:`register_config_provider`, :func:`tuned_config`, :func:`register_target_schedule`,
:func:`target_schedule`.

A strategy function ``fstrategy(attrs, inputs, out_type, target) -> OpStrategy`` is registered
per op and *target key* with ``@register_strategy(op_name, "cpu")``, or on the op's
:class:`~kiln.relay.op.op.StrategyFunction` (``@dense_strategy.register("cpu")``). An op's
``FTVMStrategy`` attribute dispatches on ``target.keys`` in order and falls back to the
``"generic"`` registration; an op registered with a compute and a schedule
(``register_compute`` + ``register_injective_schedule`` …) gets its ``generic`` strategy from
them with :func:`register_generic_strategy`, at the latest when it is first lowered.
:func:`select_implementation` runs the strategy and takes the implementation with the highest
``plevel`` unless a tuner's selector picks another by name, or tuning records (a config
provider: ``kiln.autotvm``'s dispatch context) know configs for some implementations: then the
one with the lowest measured cost runs with its tuned knobs.

Example
-------
>>> from kiln.relay.op.strategy import OpStrategy
>>> s = OpStrategy()
>>> s.add_implementation(lambda a, i, t: i, lambda a, o, t: None, name="copy.generic")
>>> s.implementations[0].name
'copy.generic'
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.runtime.error import OpNotImplemented, TVMError

__all__ = ["OpImplementation", "OpStrategy", "register_strategy", "strategy_for",
           "register_implementation", "IMPLEMENTATIONS", "IMPLEMENTATIONS_OF",
           "select_implementation", "register_tuned_selector", "register_config_provider",
           "tuned_config", "register_target_schedule", "target_schedule", "target_keys",
           "registered_keys", "register_generic_strategy", "implementation_stem",
           "registered_strategy_functions", "tuning_active", "register_tuning_probe"]


@dataclass(frozen=True)
class OpImplementation:
    """One way to implement an op: ``compute(attrs, inputs, out_type) -> [Tensor]`` and
    ``schedule(attrs, outs, target) -> Schedule``, under a name like ``dense_pack.x86``.

    ``config`` holds the schedule's tunable knobs (tile sizes …) with their default values.
    """

    compute: Callable
    schedule: Callable
    name: str
    plevel: int = 10
    config: dict = field(default_factory=dict)


class OpStrategy:
    """The implementations an op has for one call (attrs, input shapes, target)."""

    def __init__(self) -> None:
        self.implementations: list[OpImplementation] = []

    def add_implementation(self, compute: Callable, schedule: Callable, name: str = "default",
                           plevel: int = 10, config: dict | None = None) -> None:
        self.implementations.append(
            OpImplementation(compute, schedule, name, plevel, dict(config or {})))

    def add(self, impl: OpImplementation) -> None:
        """Add a registered implementation (see :func:`register_implementation`)."""
        self.implementations.append(impl)

    def __repr__(self) -> str:
        names = ", ".join(f"{i.name}@{i.plevel}" for i in self.implementations)
        return f"OpStrategy([{names}])"


# implementation name ("dense_pack.x86") -> its compute + schedule pair and knobs
IMPLEMENTATIONS: dict[str, OpImplementation] = {}
# op name -> names of the implementations its strategies offer
IMPLEMENTATIONS_OF: dict[str, list[str]] = {}


def register_implementation(compute: Callable, schedule: Callable, name: str,
                            plevel: int = 10, config: dict | None = None,
                            op_name: str | None = None) -> OpImplementation:
    """Record a compute + schedule pair under ``name`` (one name, one pair) for ``op_name``."""
    impl = OpImplementation(compute, schedule, name, plevel, dict(config or {}))
    present = IMPLEMENTATIONS.get(name)
    if present is not None and (present.compute is not compute or
                                present.schedule is not schedule):
        raise TVMError(f"implementation {name!r} registered twice with different halves")
    IMPLEMENTATIONS[name] = impl
    if op_name is not None and name not in IMPLEMENTATIONS_OF.setdefault(op_name, []):
        IMPLEMENTATIONS_OF[op_name].append(name)
    return impl


# op name -> target key -> strategy function
_STRATEGIES: dict[str, dict[str, Callable]] = {}
# schedule kind ("injective", "reduce") -> target key -> schedule(outs)
_TARGET_SCHEDULES: dict[str, dict[str, Callable]] = {}
_TUNED_SELECTORS: list[Callable] = []
_CONFIG_PROVIDERS: list[Callable] = []
_TUNING_PROBES: list[Callable[[], bool]] = []


def target_keys(target: Any) -> tuple[str, ...]:
    """The strategy keys of ``target`` (a Target, a string, or None for the current one)."""
    from kiln.target import Target

    if target is None:
        target = Target.current(allow_none=True)
        if target is None:
            return ("cpu",)
    if isinstance(target, str):
        target = Target(target)
    return tuple(target.keys)


def _dispatch(op_name: str) -> Callable:
    def fstrategy(attrs: Any, inputs: list, out_type: Any, target: Any) -> OpStrategy:
        table = _STRATEGIES[op_name]
        for key in (*target_keys(target), "generic"):
            if key in table:
                return table[key](attrs, inputs, out_type, target)
        raise OpNotImplemented(f"operator {op_name} has no strategy for target keys "
                               f"{target_keys(target)}")

    fstrategy.__name__ = f"{op_name}_strategy"
    return fstrategy


def register_strategy(op_name: str, target_key: str = "generic") -> Callable:
    """Decorator: ``fstrategy`` implements ``op_name`` on targets with ``target_key``.

    Example (registers nothing new: the generic ``add`` strategy already exists)
    -------
    >>> from kiln.relay.op.strategy import registered_keys
    >>> registered_keys("add")
    ['generic']
    """
    def decorate(fstrategy: Callable) -> Callable:
        from kiln.ir.op import Op

        table = _STRATEGIES.setdefault(op_name, {})
        if target_key in table:
            raise TVMError(f"strategy of {op_name} for key {target_key!r} registered twice")
        table[target_key] = fstrategy
        op = Op.get(op_name)
        if op.get_attr("FTVMStrategy") is None:
            op.set_attr("FTVMStrategy", _dispatch(op_name))
        return fstrategy

    return decorate


def registered_keys(op_name: str) -> list[str]:
    """Target keys that have a strategy for ``op_name``."""
    return sorted(_STRATEGIES.get(op_name, {}))


def implementation_stem(op_name: str) -> str:
    """``nn.dense`` → ``dense``; ``dyn.nn.pad`` → ``dyn_pad`` (apart from ``nn.pad``'s)."""
    stem = op_name.split(".")[-1]
    return f"dyn_{stem}" if op_name.startswith("dyn.") else stem


def register_generic_strategy(op_name: str) -> bool:
    """Give ``op_name`` the ``generic`` strategy made of its ``FTVMCompute`` and
    ``FTVMSchedule`` (one implementation, ``<op>.generic``), as TVM's
    ``_create_fstrategy_from_schedule``. False when the op lacks either or already has one."""
    from kiln.ir.op import Op

    op = Op.get(op_name)
    compute, schedule = op.get_attr("FTVMCompute"), op.get_attr("FTVMSchedule")
    if compute is None or schedule is None or "generic" in _STRATEGIES.get(op_name, {}):
        return False
    impl = register_implementation(compute, schedule, f"{implementation_stem(op_name)}.generic",
                                   op_name=op_name)

    def generic_strategy(attrs: Any, inputs: list, out_type: Any, target: Any) -> OpStrategy:
        strategy = OpStrategy()
        strategy.add(impl)
        return strategy

    generic_strategy.__name__ = f"{implementation_stem(op_name)}_strategy_generic"
    register_strategy(op_name, "generic")(generic_strategy)
    return True


def strategy_for(op: Any, attrs: Any, inputs: list, out_type: Any, target: Any) -> OpStrategy:
    """Run ``op``'s ``FTVMStrategy`` for this call."""
    from kiln.ir.op import Op

    op = Op.get(op) if isinstance(op, str) else op
    fstrategy = op.get_attr("FTVMStrategy")
    if fstrategy is None and register_generic_strategy(op.name):
        # registered with a compute and a schedule after the strategy layer was loaded
        fstrategy = op.get_attr("FTVMStrategy")
    if fstrategy is None:
        raise OpNotImplemented(f"operator {op.name} has no FTVMStrategy (register a compute "
                               "and a schedule, or a strategy)")
    strategy = fstrategy(attrs, inputs, out_type, target)
    if not strategy.implementations:
        raise OpNotImplemented(f"operator {op.name}: the strategy has no implementation for "
                               f"these inputs on {target}")
    return strategy


def register_tuned_selector(selector: Callable) -> Callable:
    """``selector(op, attrs, inputs, out_type, target, implementations)`` may return the name
    of the implementation a tuning record prefers (or None); the newest selector asks first."""
    _TUNED_SELECTORS.insert(0, selector)
    return selector


def register_config_provider(provider: Callable) -> Callable:
    """``provider(impl_name, attrs, inputs, out_type, target)`` returns ``(cost, knobs)`` when
    tuning records hold a config for that implementation of this call, else None. ``inputs``
    and ``out_type`` need only ``shape`` and ``dtype`` (te tensors or Relay types)."""
    if provider not in _CONFIG_PROVIDERS:
        _CONFIG_PROVIDERS.append(provider)
    return provider


def register_tuning_probe(probe: Callable[[], bool]) -> Callable[[], bool]:
    """``probe()`` says whether tuning records are in effect now (e.g. inside autotvm's
    ``ApplyHistoryBest``): builds then choose kernels from them, so the build cache stays out
    of the way."""
    if probe not in _TUNING_PROBES:
        _TUNING_PROBES.append(probe)
    return probe


def tuning_active() -> bool:
    """Whether a tuned selector is registered or a tuning probe reports records in effect."""
    return bool(_TUNED_SELECTORS) or any(probe() for probe in _TUNING_PROBES)


def registered_strategy_functions() -> list[tuple[str, Callable]]:
    """``(where, function)`` of every strategy, target schedule and implementation registered
    so far (``where`` is ``"<op>/<target key>"``, ``"schedule <kind>/<key>"`` or the
    implementation name): the build cache keys builds by the ones users registered."""
    found = [(f"{op}/{key}", fn) for op, table in _STRATEGIES.items()
             for key, fn in table.items()]
    found += [(f"schedule {kind}/{key}", fn) for kind, table in _TARGET_SCHEDULES.items()
              for key, fn in table.items()]
    for name, impl in IMPLEMENTATIONS.items():
        found += [(f"{name} compute", impl.compute), (f"{name} schedule", impl.schedule)]
    return found


def tuned_config(impl_name: str, attrs: Any, inputs: list, out_type: Any,
                 target: Any) -> tuple[float, dict] | None:
    """``(cost, knobs)`` of the tuned config of ``impl_name`` for this call, or None."""
    for provider in _CONFIG_PROVIDERS:
        found = provider(impl_name, attrs, inputs, out_type, target)
        if found is not None:
            return found
    return None


def _with_config(impl: OpImplementation, knobs: dict) -> OpImplementation:
    """``impl`` whose compute and schedule both run with the tuned ``knobs``."""
    return OpImplementation(functools.partial(impl.compute, config=knobs),
                            functools.partial(impl.schedule, config=knobs), impl.name,
                            impl.plevel, {**impl.config, **knobs})


def select_implementation(op: Any, attrs: Any, inputs: list, out_type: Any,
                          target: Any) -> tuple[OpImplementation, list]:
    """The chosen implementation and its output tensors for this call.

    A tuned selector's choice wins; otherwise the highest ``plevel`` (the first registered on
    a tie).

    Example
    -------
    >>> from kiln import te
    >>> from kiln.ir.type import TensorType
    >>> from kiln.relay.op.nn.dense import dense_op
    >>> from kiln.relay.op.op_attrs import DenseAttrs
    >>> from kiln.relay.op.strategy import select_implementation
    >>> x, w = te.placeholder((4, 32)), te.placeholder((16, 32))
    >>> impl, outs = select_implementation(dense_op, DenseAttrs(), [x, w],
    ...                                    TensorType((4, 16), "float32"), "llvm")
    >>> impl.name, impl.config["tile_x"]
    ('dense_pack.x86', 16)
    """
    from kiln.ir.op import Op

    op = Op.get(op) if isinstance(op, str) else op
    impls = strategy_for(op, attrs, inputs, out_type, target).implementations
    chosen = None
    for selector in _TUNED_SELECTORS:
        name = selector(op, attrs, inputs, out_type, target, impls)
        chosen = next((i for i in impls if i.name == name), None)
        if chosen is not None:
            break
    if chosen is None and _CONFIG_PROVIDERS:
        tuned = {}
        for impl in impls:  # every implementation is asked: extraction records them all
            found = tuned_config(impl.name, attrs, inputs, out_type, target)
            if found is not None:
                tuned[impl.name] = found
        if tuned:
            best = min((i for i in impls if i.name in tuned), key=lambda i: tuned[i.name][0])
            chosen = _with_config(best, tuned[best.name][1])
    if chosen is None:
        chosen = max(impls, key=lambda i: i.plevel)
    outs = chosen.compute(attrs, inputs, out_type)
    return chosen, list(outs) if isinstance(outs, list | tuple) else [outs]


def register_target_schedule(kind: str, target_key: str) -> Callable:
    """Decorator: ``schedule(outs)`` schedules fused groups of ``kind`` on ``target_key``."""
    def decorate(fschedule: Callable) -> Callable:
        _TARGET_SCHEDULES.setdefault(kind, {})[target_key] = fschedule
        return fschedule

    return decorate


def target_schedule(kind: str, outs: Any, target: Any = None) -> Any:
    """Schedule ``outs`` with the ``kind`` schedule of the first matching target key."""
    table = _TARGET_SCHEDULES[kind]
    for key in (*target_keys(target), "generic"):
        if key in table:
            return table[key](outs)
    raise TVMError(f"no {kind} schedule registered")
