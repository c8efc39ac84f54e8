"""Dispatch contexts: which config a template uses for a workload on a target.

Entry points: :class:`DispatchContext` (``DispatchContext.current``), :class:`ApplyConfig`
(one fixed config, used while tuning), :class:`ApplyFixedConfig`, :class:`ApplyHistoryBest`
(the best config per workload from tuning records; ``apply_history_best``),
:class:`ApplyGraphBest` (a graph tuner's choices; ``apply_graph_best``), and
:class:`FallbackContext` (the root: each template's defaults, warned about once).

Contexts stack with ``with``; a query the innermost context cannot answer falls through to
the one outside it, ending at the root :class:`FallbackContext`.

Example
-------
>>> from kiln import autotvm
>>> from kiln.autotvm.task.space import ConfigSpace
>>> cfg = ConfigSpace().get(0)
>>> with autotvm.ApplyConfig(cfg):
...     autotvm.DispatchContext.current.query(None, ("w",)) is cfg
True
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.task.space import FallbackConfigEntity
from kiln.runtime.error import TVMError

__all__ = ["DispatchContext", "ApplyConfig", "ApplyFixedConfig", "ApplyHistoryBest",
           "ApplyGraphBest", "FallbackContext", "apply_history_best", "apply_graph_best",
           "clear_fallback_cache"]

logger = logging.getLogger("autotvm")


class DispatchContext:
    """Base of the config dispatch contexts; ``current`` is the innermost one."""

    current: DispatchContext

    def __init__(self) -> None:
        self._old_ctx = DispatchContext.current

    def query(self, target: Any, workload: Any) -> Any:
        """The config for ``workload`` on ``target``, from here or an outer context."""
        ret = self._query_inside(target, workload)
        if ret is None and self._old_ctx is not None:
            ret = self._old_ctx.query(target, workload)
        return ret

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        """Record ``cfg`` for ``workload`` (contexts that keep configs override this)."""
        raise TVMError(f"{type(self).__name__} cannot be updated")

    def _query_inside(self, target: Any, workload: Any) -> Any:
        raise NotImplementedError

    def __enter__(self) -> DispatchContext:
        self._old_ctx = DispatchContext.current
        DispatchContext.current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        DispatchContext.current = self._old_ctx


class ApplyConfig(DispatchContext):
    """Every query gets ``config`` (tuning instantiates one candidate this way); the workload
    queried last is kept in ``workload``."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self._config = config
        self.workload = None

    def _query_inside(self, target: Any, workload: Any) -> Any:
        self.workload = workload
        return self._config

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self._config = cfg


class ApplyFixedConfig(DispatchContext):
    """Configs given per task name (``{task_name: ConfigEntity}``), for tests and scripts."""

    def __init__(self, configs: dict[str, Any]) -> None:
        super().__init__()
        self._configs = dict(configs)

    def _query_inside(self, target: Any, workload: Any) -> Any:
        if workload:
            return self._configs.get(workload[0])
        return None

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self._configs[workload[0]] = cfg


def _target_keys(target: Any) -> tuple[str, ...]:
    if target is None:
        return ()
    return tuple(getattr(target, "keys", ()))


class ApplyHistoryBest(DispatchContext):
    """The lowest-cost config per workload from tuning records.

    ``records`` is a log file path (or a list of them) or an iterable of
    ``(MeasureInput, MeasureResult)``. Records are matched by the target's ``-model`` (when
    known) and else by its keys (``cpu``, ``arm_cpu`` ...), as TVM does: ``-mcpu`` is not part
    of the match. Error records are ignored.
    """

    def __init__(self, records: Any = None) -> None:
        super().__init__()
        self.best_by_targetkey: dict[tuple, tuple] = {}
        self.best_by_model: dict[tuple, tuple] = {}
        self._best_user_defined: dict[tuple, Any] = {}
        if records is not None:
            self.load(records)

    def load(self, records: Any) -> None:
        """Add the records of a file, a list of files, or ``(input, result)`` pairs."""
        from kiln.autotvm.record import load_from_file

        if isinstance(records, str | Path):
            records = [records]
        pairs: list = []
        for item in records:
            if isinstance(item, str | Path):
                pairs.extend(load_from_file(item))
            else:
                pairs.append(item)
        counted = 0
        for inp, res in pairs:
            if res.error_no != 0:
                continue
            counted += 1
            cost = sum(res.costs) / len(res.costs)
            model = inp.target.model if inp.target is not None else "unknown"
            keys = [(k, inp.task.workload) for k in _target_keys(inp.target)]
            if model != "unknown":
                keys.append((model, inp.task.workload))
            for key in keys:
                table = self.best_by_model if key[0] == model else self.best_by_targetkey
                if key not in table or cost < table[key][1].mean_cost:
                    inp.config.cost = cost
                    table[key] = (inp, _Cost(res, cost))
        logger.debug("ApplyHistoryBest: %d usable records", counted)

    def _query_inside(self, target: Any, workload: Any) -> Any:
        if target is None:
            from kiln.target import Target

            target = Target.current(allow_none=True)
            if target is None:
                raise TVMError("ApplyHistoryBest.query needs a target: pass one or enter "
                               "`with tvm.target.Target(...)`")
        model = getattr(target, "model", "unknown")
        for k in (model, *_target_keys(target)):
            if (k, workload) in self._best_user_defined:
                return self._best_user_defined[k, workload]
        if model != "unknown" and (model, workload) in self.best_by_model:
            return self.best_by_model[model, workload][0].config
        for k in _target_keys(target):
            if (k, workload) in self.best_by_targetkey:
                return self.best_by_targetkey[k, workload][0].config
        return None

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        for k in (getattr(target, "model", "unknown"), *_target_keys(target)):
            self._best_user_defined[k, workload] = cfg


class _Cost:
    """A record's result with its mean cost (what best-of comparisons use)."""

    def __init__(self, result: Any, mean_cost: float) -> None:
        self.result = result
        self.mean_cost = mean_cost


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("tune.log"):`` builds with the tuned configs."""
    return ApplyHistoryBest(records)


class ApplyGraphBest(ApplyHistoryBest):
    """The configs a graph tuner chose (``write_opt_sch2record_file``): one record per
    workload, applied as written, whatever other records would be faster alone.

    TVM's ``ApplyGraphBest`` hands out one record per *node*, in the order the build asks;
    kiln compiles one kernel per distinct workload, so its graph tuner gives nodes of one
    workload one choice and the file one record per workload. A file with two configs for
    one workload is refused (it is not a graph tuner's).
    """

    def load(self, records: Any) -> None:
        from kiln.autotvm.record import load_from_file

        if isinstance(records, str | Path):
            records = list(load_from_file(records))
        records = list(records)
        chosen: dict[tuple, str] = {}
        for inp, _ in records:
            config = str(inp.config)
            if chosen.setdefault(inp.task.workload, config) != config:
                raise TVMError(f"ApplyGraphBest: two configs for workload "
                               f"{inp.task.workload} ({chosen[inp.task.workload]} and "
                               f"{config}); expected a graph tuner's records")
        super().load(records)


def apply_graph_best(records: Any) -> ApplyGraphBest:
    """``with autotvm.apply_graph_best("graph_opt.log"):`` builds with a graph tuner's
    choices."""
    return ApplyGraphBest(records)


class FallbackContext(DispatchContext):
    """The root context: a template's defaults (a :class:`FallbackConfigEntity` per target
    and workload, cached), with one log message per workload."""

    def __init__(self) -> None:
        self._old_ctx = None
        self.memory: dict[tuple, FallbackConfigEntity] = {}
        self.silent = False

    def _query_inside(self, target: Any, workload: Any) -> Any:
        key = (str(target), workload)
        if key in self.memory:
            return self.memory[key]
        if not (self.silent or GLOBAL_SCOPE.silent):
            logger.warning("Cannot find config for target=%s, workload=%s. A fallback "
                           "configuration is used, which may bring great performance "
                           "regression.", target, workload)
        cfg = FallbackConfigEntity()
        self.memory[key] = cfg
        return cfg

    def clear_cache(self, target: Any, workload: Any) -> None:
        """Forget the fallback config of ``workload`` (after it was tuned)."""
        self.memory.pop((str(target), workload), None)

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        self.memory[str(target), workload] = cfg


DispatchContext.current = FallbackContext()


def clear_fallback_cache(target: Any, workload: Any) -> None:
    """Forget the root context's fallback for ``workload`` (TVM's helper of the same name)."""
    context = DispatchContext.current
    while not isinstance(context, FallbackContext):
        context = context._old_ctx
    context.clear_cache(target, workload)

