"""AutoTVM tasks (TVM's ``autotvm.task``): templates, config spaces, dispatch contexts,
TOPI template registration and extraction of tasks from Relay programs."""

from __future__ import annotations

from kiln.autotvm.task.dispatcher import (
    ApplyConfig,
    ApplyFixedConfig,
    ApplyGraphBest,
    ApplyHistoryBest,
    DispatchContext,
    FallbackContext,
    apply_graph_best,
    apply_history_best,
    clear_fallback_cache,
)
from kiln.autotvm.task.relay_integration import (
    extract_from_multiple_program,
    extract_from_program,
)
from kiln.autotvm.task.space import (
    ConfigEntity,
    ConfigSpace,
    FallbackConfigEntity,
    InstantiationError,
)
from kiln.autotvm.task.task import (
    TASK_TABLE,
    MissingTask,
    Task,
    args_to_workload,
    compute_flop,
    create,
    deserialize_args,
    get_config,
    serialize_args,
    template,
)
from kiln.autotvm.task.topi_integration import (
    TaskExtractEnv,
    get_workload,
    register_topi_compute,
    register_topi_schedule,
)

__all__ = ["ApplyConfig", "ApplyFixedConfig", "ApplyHistoryBest", "ApplyGraphBest",
           "DispatchContext", "FallbackContext", "apply_history_best", "apply_graph_best",
           "clear_fallback_cache", "ConfigEntity",
           "ConfigSpace", "FallbackConfigEntity", "InstantiationError", "TASK_TABLE",
           "MissingTask", "Task", "args_to_workload", "compute_flop", "create",
           "deserialize_args", "get_config", "serialize_args", "template", "TaskExtractEnv",
           "get_workload", "register_topi_compute", "register_topi_schedule",
           "extract_from_program", "extract_from_multiple_program"]

